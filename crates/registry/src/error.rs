//! Confluent's error codes and messages, as clients and tools read them: the body is
//! `{"error_code": N, "message": "..."}`, and the HTTP status is the code's first three digits.

/// An error the registry answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RegistryError {
    pub code: u32,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, RegistryError>;

impl RegistryError {
    pub fn new(code: u32, message: impl Into<String>) -> RegistryError {
        RegistryError {
            code,
            message: message.into(),
        }
    }

    /// The HTTP status: 40401 is a 404, 409 is itself.
    pub fn status(&self) -> u16 {
        let mut code = self.code;
        while code >= 1000 {
            code /= 10;
        }
        u16::try_from(code).unwrap_or(500)
    }

    pub fn subject_not_found(subject: &str) -> RegistryError {
        RegistryError::new(40401, format!("Subject '{subject}' not found."))
    }

    pub fn version_not_found(version: &str) -> RegistryError {
        RegistryError::new(40402, format!("Version {version} not found."))
    }

    pub fn schema_not_found() -> RegistryError {
        RegistryError::new(40403, "Schema not found")
    }

    pub fn schema_id_not_found(id: u32) -> RegistryError {
        RegistryError::new(40403, format!("Schema {id} not found"))
    }

    pub fn invalid_schema(message: impl Into<String>) -> RegistryError {
        RegistryError::new(42201, message)
    }

    pub fn invalid_version(version: &str) -> RegistryError {
        RegistryError::new(
            42202,
            format!(
                "The specified version '{version}' is not a valid version id. Allowed values are \
                 between [1, 2^31-1] and the string \"latest\""
            ),
        )
    }

    pub fn invalid_compatibility() -> RegistryError {
        RegistryError::new(
            42203,
            "Invalid compatibility level. Valid values are none, backward, forward, full, \
             backward_transitive, forward_transitive, and full_transitive",
        )
    }

    pub fn invalid_mode() -> RegistryError {
        RegistryError::new(
            42204,
            "Invalid mode. Valid values are READWRITE, READONLY and IMPORT.",
        )
    }

    pub fn not_permitted(message: impl Into<String>) -> RegistryError {
        RegistryError::new(42205, message)
    }

    pub fn reference_exists(subject: &str, version: u32) -> RegistryError {
        RegistryError::new(
            42206,
            format!(
                "One or more references exist to the schema \
                 {{magic=1,keytype=SCHEMA,subject={subject},version={version}}}."
            ),
        )
    }

    pub fn invalid_subject(subject: &str) -> RegistryError {
        RegistryError::new(
            42208,
            format!("The specified subject '{subject}' is not a valid."),
        )
    }

    pub fn incompatible(subject: &str, details: &[String]) -> RegistryError {
        RegistryError::new(
            409,
            format!(
                "Schema being registered is incompatible with an earlier schema for subject \
                 \"{subject}\", details: [{}]",
                details.join(", ")
            ),
        )
    }

    pub fn store(e: impl std::fmt::Display) -> RegistryError {
        RegistryError::new(50001, format!("Error in the backend data store: {e}"))
    }

    pub fn unauthorized() -> RegistryError {
        RegistryError::new(401, "Unauthorized")
    }

    /// 40301, as Confluent's RBAC answers: which operation on which resource was refused.
    pub fn forbidden(principal: &str, what: impl std::fmt::Display) -> RegistryError {
        RegistryError::new(40301, format!("{principal} is denied {what}"))
    }
}

impl From<weir_meta::MetaError> for RegistryError {
    fn from(e: weir_meta::MetaError) -> RegistryError {
        RegistryError::store(e)
    }
}

#[cfg(test)]
mod tests {
    use super::RegistryError;

    #[test]
    fn the_status_is_the_codes_first_three_digits() {
        assert_eq!(RegistryError::subject_not_found("s").status(), 404);
        assert_eq!(RegistryError::incompatible("s", &[]).status(), 409);
        assert_eq!(RegistryError::invalid_schema("x").status(), 422);
        assert_eq!(RegistryError::store("x").status(), 500);
        assert_eq!(RegistryError::unauthorized().status(), 401);
    }
}
