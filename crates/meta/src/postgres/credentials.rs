//! [`Credentials`] on PostgreSQL.

use super::{backend, PostgresMetaStore};
use crate::{Credentials, Result, ScramCredential};

const COLUMNS: &str = "user_name, mechanism, salt, stored_key, server_key, iterations";

/// Byte order, as on SQLite, whatever the database's collation.
const ORDER: &str = "ORDER BY user_name COLLATE \"C\", mechanism COLLATE \"C\"";

fn credential_row(r: &tokio_postgres::Row) -> (String, ScramCredential) {
    (
        r.get(0),
        ScramCredential {
            mechanism: r.get(1),
            salt: r.get(2),
            stored_key: r.get(3),
            server_key: r.get(4),
            iterations: r.get(5),
        },
    )
}

#[async_trait::async_trait]
impl Credentials for PostgresMetaStore {
    async fn upsert_scram_credential(&self, user: &str, credential: ScramCredential) -> Result<()> {
        let c = self.client().await?;
        c.execute(
            &format!(
                "INSERT INTO scram_credentials ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (user_name, mechanism) DO UPDATE SET
                   salt = excluded.salt, stored_key = excluded.stored_key,
                   server_key = excluded.server_key, iterations = excluded.iterations"
            ),
            &[
                &user,
                &credential.mechanism,
                &credential.salt,
                &credential.stored_key,
                &credential.server_key,
                &credential.iterations,
            ],
        )
        .await
        .map_err(backend("storing a SCRAM credential"))?;
        Ok(())
    }

    async fn delete_scram_credential(&self, user: &str, mechanism: &str) -> Result<bool> {
        let c = self.client().await?;
        let n = c
            .execute(
                "DELETE FROM scram_credentials WHERE user_name = $1 AND mechanism = $2",
                &[&user, &mechanism],
            )
            .await
            .map_err(backend("deleting a SCRAM credential"))?;
        Ok(n > 0)
    }

    async fn scram_credential(
        &self,
        user: &str,
        mechanism: &str,
    ) -> Result<Option<ScramCredential>> {
        let c = self.client().await?;
        let row = c
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM scram_credentials
                     WHERE user_name = $1 AND mechanism = $2"
                ),
                &[&user, &mechanism],
            )
            .await
            .map_err(backend("reading a SCRAM credential"))?;
        Ok(row.map(|r| credential_row(&r).1))
    }

    async fn scram_credentials(
        &self,
        users: Option<&[String]>,
    ) -> Result<Vec<(String, ScramCredential)>> {
        let c = self.client().await?;
        let rows = match users {
            None => {
                c.query(
                    &format!("SELECT {COLUMNS} FROM scram_credentials {ORDER}"),
                    &[],
                )
                .await
            }
            Some(users) => {
                c.query(
                    &format!(
                        "SELECT {COLUMNS} FROM scram_credentials WHERE user_name = ANY($1) {ORDER}"
                    ),
                    &[&users],
                )
                .await
            }
        }
        .map_err(backend("listing SCRAM credentials"))?;
        Ok(rows.iter().map(credential_row).collect())
    }
}
