//! [`Credentials`] on SQLite.

use rusqlite::{params, OptionalExtension};

use super::{backend, SqliteMetaStore};
use crate::{Credentials, Result, ScramCredential};

const COLUMNS: &str = "user_name, mechanism, salt, stored_key, server_key, iterations";

fn credential_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, ScramCredential)> {
    Ok((
        r.get(0)?,
        ScramCredential {
            mechanism: r.get(1)?,
            salt: r.get(2)?,
            stored_key: r.get(3)?,
            server_key: r.get(4)?,
            iterations: r.get(5)?,
        },
    ))
}

#[async_trait::async_trait]
impl Credentials for SqliteMetaStore {
    async fn upsert_scram_credential(&self, user: &str, credential: ScramCredential) -> Result<()> {
        let user = user.to_string();
        self.with(move |c| {
            c.execute(
                &format!(
                    "INSERT INTO scram_credentials ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (user_name, mechanism) DO UPDATE SET
                       salt = excluded.salt, stored_key = excluded.stored_key,
                       server_key = excluded.server_key, iterations = excluded.iterations"
                ),
                params![
                    user,
                    credential.mechanism,
                    credential.salt,
                    credential.stored_key,
                    credential.server_key,
                    credential.iterations
                ],
            )
            .map_err(backend("storing a SCRAM credential"))?;
            Ok(())
        })
        .await
    }

    async fn delete_scram_credential(&self, user: &str, mechanism: &str) -> Result<bool> {
        let (user, mechanism) = (user.to_string(), mechanism.to_string());
        self.with(move |c| {
            let n = c
                .execute(
                    "DELETE FROM scram_credentials WHERE user_name = ?1 AND mechanism = ?2",
                    params![user, mechanism],
                )
                .map_err(backend("deleting a SCRAM credential"))?;
            Ok(n > 0)
        })
        .await
    }

    async fn scram_credential(
        &self,
        user: &str,
        mechanism: &str,
    ) -> Result<Option<ScramCredential>> {
        let (user, mechanism) = (user.to_string(), mechanism.to_string());
        self.with(move |c| {
            c.query_row(
                &format!(
                    "SELECT {COLUMNS} FROM scram_credentials
                     WHERE user_name = ?1 AND mechanism = ?2"
                ),
                params![user, mechanism],
                credential_row,
            )
            .optional()
            .map(|row| row.map(|(_, credential)| credential))
            .map_err(backend("reading a SCRAM credential"))
        })
        .await
    }

    async fn scram_credentials(
        &self,
        users: Option<&[String]>,
    ) -> Result<Vec<(String, ScramCredential)>> {
        // Sorted and without repeats, so that one query per user yields the rows in user order,
        // each user once however often it is named.
        let users = users.map(|u| {
            let mut u = u.to_vec();
            u.sort_unstable();
            u.dedup();
            u
        });
        self.with(move |c| {
            let Some(users) = users else {
                let mut stmt = c
                    .prepare_cached(&format!(
                        "SELECT {COLUMNS} FROM scram_credentials ORDER BY user_name, mechanism"
                    ))
                    .map_err(backend("listing SCRAM credentials"))?;
                let rows = stmt
                    .query_map([], credential_row)
                    .map_err(backend("listing SCRAM credentials"))?;
                return rows
                    .collect::<rusqlite::Result<_>>()
                    .map_err(backend("listing SCRAM credentials"));
            };
            let mut stmt = c
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM scram_credentials WHERE user_name = ?1
                     ORDER BY mechanism"
                ))
                .map_err(backend("listing SCRAM credentials"))?;
            let mut all = Vec::new();
            for user in users {
                let rows = stmt
                    .query_map(params![user], credential_row)
                    .map_err(backend("listing SCRAM credentials"))?;
                for row in rows {
                    all.push(row.map_err(backend("listing SCRAM credentials"))?);
                }
            }
            Ok(all)
        })
        .await
    }
}
