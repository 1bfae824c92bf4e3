//! The PostgreSQL side of the Database operator: idempotent creation and guarded removal of a
//! role and a database, each tagged with the uid of the Kubernetes object that owns it.
//!
//! The tag is the object's comment (`COMMENT ON DATABASE … IS 'finale.dev/owner-uid=<uid>'`),
//! stored in the server's catalog next to the object itself, so it survives operator restarts
//! and tells apart what Finale created from what was already there. A database whose tag is
//! not this uid is never altered or dropped.
//!
//! Roles may be shared: several Databases can name the same owner. A role Finale created is
//! tagged as managed ([`ROLE_TAG`]) rather than by one uid, and any Database that owned it may
//! drop it once it owns nothing any more. Each Database drops its own database before it tries
//! the role, so whichever Database goes last finds the role free and drops it; while another
//! database still belongs to the role, PostgreSQL refuses (`2BP01`) and the role stays for
//! that database's own teardown. A role Finale did not create is never dropped.

use std::time::Duration;

use postgres_protocol::escape::{escape_identifier, escape_literal};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

/// The prefix of the comment that marks a database as one Database object's.
const TAG_PREFIX: &str = "finale.dev/owner-uid=";
/// The comment prefix of a role Finale created.
pub const ROLE_TAG: &str = "finale.dev/managed-role";
/// A server that does not answer within this long counts as down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("cannot connect to PostgreSQL at {server}")]
    Connect {
        server: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("PostgreSQL at {server} did not answer within {CONNECT_TIMEOUT:?}")]
    ConnectTimeout { server: String },
    #[error("the connection URL is not valid: {0}")]
    BadUrl(String),
    #[error("PostgreSQL refused `{statement}`")]
    Statement {
        statement: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

impl PgError {
    /// Whether waiting may fix it (the server is down, restarting or overloaded), as opposed to
    /// a problem a person must fix (bad credentials, missing privileges).
    pub fn is_transient(&self) -> bool {
        let source = match self {
            PgError::ConnectTimeout { .. } => return true,
            PgError::BadUrl(_) => return false,
            PgError::Connect { source, .. } | PgError::Statement { source, .. } => source,
        };
        match source.code() {
            None => true,
            Some(code) => [
                SqlState::ADMIN_SHUTDOWN,
                SqlState::CRASH_SHUTDOWN,
                SqlState::CANNOT_CONNECT_NOW,
                SqlState::TOO_MANY_CONNECTIONS,
                SqlState::CONNECTION_EXCEPTION,
                SqlState::CONNECTION_FAILURE,
                SqlState::T_R_SERIALIZATION_FAILURE,
                SqlState::T_R_DEADLOCK_DETECTED,
                SqlState::OBJECT_IN_USE,
            ]
            .contains(code),
        }
    }
}

/// What [`PgServer::ensure_role`] found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum RoleState {
    Created,
    /// It exists, created by Finale (for this or another Database).
    Managed,
    /// It existed before and Finale did not create it: used, never dropped.
    Foreign,
}

/// What [`PgServer::ensure_database`] found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum DatabaseState {
    Created,
    Ours,
    /// A database of that name that this object did not create, with its comment.
    Foreign {
        comment: Option<String>,
    },
}

#[derive(Debug, PartialEq, Eq)]
pub enum DropOutcome {
    Dropped,
    AlreadyGone,
    /// It exists but is not this object's: left alone.
    NotOurs,
    /// A role that still owns objects (for example another Database's database): left for
    /// the teardown of that one.
    StillInUse(String),
}

/// Checks a database or role name against the rules the operator accepts: plain lower-case
/// identifiers, so that the name in Kubernetes is exactly the name in PostgreSQL.
pub fn validate_name(field: &str, name: &str) -> Result<(), String> {
    let rules = "use 1 to 63 characters of a-z, 0-9 and _, starting with a letter or _";
    if name.is_empty() || name.len() > 63 {
        return Err(format!(
            "{field} {name:?} must be 1 to 63 characters long: {rules}"
        ));
    }
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
        return Err(format!("{field} {name:?} is not a valid name: {rules}"));
    }
    if matches!(name, "postgres" | "template0" | "template1" | "public") || name.starts_with("pg_")
    {
        return Err(format!(
            "{field} {name:?} is reserved by PostgreSQL: choose another name"
        ));
    }
    Ok(())
}

fn is_managed_role(comment: Option<&str>) -> bool {
    comment.is_some_and(|c| c.starts_with(ROLE_TAG))
}

fn tag(uid: &str) -> String {
    format!("{TAG_PREFIX}{uid}")
}

/// A connection to one PostgreSQL server, as a role that may create roles and databases.
pub struct PgServer {
    client: Client,
    server: String,
}

/// Connects (bounded in time) with the URL from the Database's Secret.
pub async fn connect(url: &str) -> Result<PgServer, PgError> {
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e: tokio_postgres::Error| PgError::BadUrl(e.to_string()))?;
    let server = config
        .get_hosts()
        .iter()
        .zip(config.get_ports().iter().chain(std::iter::repeat(&5432)))
        .map(|(host, port)| match host {
            tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .next()
        .unwrap_or_else(|| "localhost:5432".to_string());
    let connecting = config.connect(NoTls);
    let (client, connection) = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| PgError::ConnectTimeout {
            server: server.clone(),
        })?
        .map_err(|source| PgError::Connect {
            server: server.clone(),
            source,
        })?;
    // tokio-postgres does its I/O in this future; it ends when the client is dropped.
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "PostgreSQL connection closed");
        }
    });
    Ok(PgServer { client, server })
}

impl PgServer {
    /// `host:port` of the server, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    async fn execute(&self, statement: String) -> Result<(), PgError> {
        self.client
            .batch_execute(&statement)
            .await
            .map_err(|source| PgError::Statement { statement, source })
    }

    async fn comment_of(&self, query: &str, name: &str) -> Result<Option<Option<String>>, PgError> {
        let rows =
            self.client
                .query(query, &[&name])
                .await
                .map_err(|source| PgError::Statement {
                    statement: query.to_string(),
                    source,
                })?;
        Ok(rows.first().map(|row| row.get::<_, Option<String>>(0)))
    }

    /// The role's comment: `None` if there is no such role, `Some(None)` if it has none.
    async fn role_comment(&self, role: &str) -> Result<Option<Option<String>>, PgError> {
        self.comment_of(
            "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = $1",
            role,
        )
        .await
    }

    async fn database_comment(&self, database: &str) -> Result<Option<Option<String>>, PgError> {
        self.comment_of(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = $1",
            database,
        )
        .await
    }

    pub async fn database_exists(&self, database: &str) -> Result<bool, PgError> {
        Ok(self.database_comment(database).await?.is_some())
    }

    /// The role's state without changing anything: `None` if it does not exist. Lets a
    /// converged object cost reads only, no DDL.
    pub async fn inspect_role(&self, role: &str) -> Result<Option<RoleState>, PgError> {
        Ok(self.role_comment(role).await?.map(|comment| {
            if is_managed_role(comment.as_deref()) {
                RoleState::Managed
            } else {
                RoleState::Foreign
            }
        }))
    }

    /// The database's state without changing anything: `None` if it does not exist, and for a
    /// database of ours whether `owner` already owns it.
    pub async fn inspect_database(
        &self,
        database: &str,
        owner: &str,
        owner_uid: &str,
    ) -> Result<Option<(DatabaseState, bool)>, PgError> {
        let query = "SELECT shobj_description(d.oid, 'pg_database'), pg_get_userbyid(d.datdba) \
                     FROM pg_database d WHERE d.datname = $1";
        let rows = self
            .client
            .query(query, &[&database])
            .await
            .map_err(|source| PgError::Statement {
                statement: query.to_string(),
                source,
            })?;
        Ok(rows.first().map(|row| {
            let comment: Option<String> = row.get(0);
            let current_owner: String = row.get(1);
            if comment.as_deref() == Some(tag(owner_uid).as_str()) {
                (DatabaseState::Ours, current_owner == owner)
            } else {
                (DatabaseState::Foreign { comment }, false)
            }
        }))
    }

    /// Creates the role (without login: it only owns) unless it exists.
    pub async fn ensure_role(&self, role: &str, owner_uid: &str) -> Result<RoleState, PgError> {
        let ident = escape_identifier(role);
        match self.execute(format!("CREATE ROLE {ident} NOLOGIN")).await {
            Ok(()) => {
                self.execute(format!(
                    "COMMENT ON ROLE {ident} IS {}",
                    escape_literal(&format!("{ROLE_TAG} created-for={owner_uid}"))
                ))
                .await?;
                Ok(RoleState::Created)
            }
            Err(PgError::Statement { source, .. })
                if source.code() == Some(&SqlState::DUPLICATE_OBJECT) =>
            {
                let comment = self.role_comment(role).await?.flatten();
                Ok(if is_managed_role(comment.as_deref()) {
                    RoleState::Managed
                } else {
                    RoleState::Foreign
                })
            }
            Err(other) => Err(other),
        }
    }

    /// Creates the database owned by `owner` unless it exists; converges the owner of a
    /// database that is ours.
    pub async fn ensure_database(
        &self,
        database: &str,
        owner: &str,
        owner_uid: &str,
    ) -> Result<DatabaseState, PgError> {
        let ident = escape_identifier(database);
        let owner_ident = escape_identifier(owner);
        // CREATE DATABASE cannot run in a transaction, so the tag follows in a second
        // statement. A crash between the two leaves an empty untagged database, which is then
        // reported as not adopted: never claiming an untagged database is what keeps others'
        // databases safe, and a person can tell the two cases apart by its emptiness.
        match self
            .execute(format!("CREATE DATABASE {ident} OWNER {owner_ident}"))
            .await
        {
            Ok(()) => {
                self.execute(format!(
                    "COMMENT ON DATABASE {ident} IS {}",
                    escape_literal(&tag(owner_uid))
                ))
                .await?;
                Ok(DatabaseState::Created)
            }
            Err(PgError::Statement { source, .. })
                if source.code() == Some(&SqlState::DUPLICATE_DATABASE) =>
            {
                let comment = self.database_comment(database).await?.flatten();
                if comment.as_deref() != Some(tag(owner_uid).as_str()) {
                    return Ok(DatabaseState::Foreign { comment });
                }
                self.execute(format!("ALTER DATABASE {ident} OWNER TO {owner_ident}"))
                    .await?;
                Ok(DatabaseState::Ours)
            }
            Err(other) => Err(other),
        }
    }

    /// Closes every session on the database and drops it, if it is ours.
    pub async fn drop_database(
        &self,
        database: &str,
        owner_uid: &str,
    ) -> Result<DropOutcome, PgError> {
        let Some(comment) = self.database_comment(database).await? else {
            return Ok(DropOutcome::AlreadyGone);
        };
        if comment.as_deref() != Some(tag(owner_uid).as_str()) {
            return Ok(DropOutcome::NotOurs);
        }
        let ident = escape_identifier(database);
        // Refuse new sessions first, then end the open ones: WITH (FORCE) does both on
        // PostgreSQL 13+, and the explicit steps keep older servers working.
        self.execute(format!("ALTER DATABASE {ident} ALLOW_CONNECTIONS false"))
            .await?;
        self.client
            .execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1 AND pid <> pg_backend_pid()",
                &[&database],
            )
            .await
            .map_err(|source| PgError::Statement {
                statement: "pg_terminate_backend".into(),
                source,
            })?;
        let version = self.client.query_one("SHOW server_version_num", &[]).await;
        let force = version
            .ok()
            .and_then(|row| row.get::<_, String>(0).parse::<u32>().ok())
            .is_some_and(|v| v >= 130_000);
        let statement = if force {
            format!("DROP DATABASE IF EXISTS {ident} WITH (FORCE)")
        } else {
            format!("DROP DATABASE IF EXISTS {ident}")
        };
        self.execute(statement).await?;
        Ok(DropOutcome::Dropped)
    }

    /// Drops the role, if Finale created it and it owns nothing any more.
    pub async fn drop_role(&self, role: &str) -> Result<DropOutcome, PgError> {
        let Some(comment) = self.role_comment(role).await? else {
            return Ok(DropOutcome::AlreadyGone);
        };
        if !is_managed_role(comment.as_deref()) {
            return Ok(DropOutcome::NotOurs);
        }
        match self
            .execute(format!("DROP ROLE IF EXISTS {}", escape_identifier(role)))
            .await
        {
            Ok(()) => Ok(DropOutcome::Dropped),
            Err(PgError::Statement { source, .. })
                if source.code() == Some(&SqlState::DEPENDENT_OBJECTS_STILL_EXIST) =>
            {
                let detail = source
                    .as_db_error()
                    .and_then(|e| e.detail().map(str::to_string))
                    .unwrap_or_else(|| source.to_string());
                Ok(DropOutcome::StillInUse(detail))
            }
            Err(other) => Err(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_lower_case_identifiers() {
        for good in ["orders", "_x", "app_2", &"a".repeat(63)] {
            assert_eq!(validate_name("spec.dbName", good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("", "1 to 63"),
            (&"a".repeat(64), "1 to 63"),
            ("Orders", "not a valid name"),
            ("2fast", "not a valid name"),
            ("drop table", "not a valid name"),
            ("a-b", "not a valid name"),
            ("postgres", "reserved"),
            ("pg_catalog", "reserved"),
        ] {
            let error = validate_name("spec.dbName", bad).expect_err(bad);
            assert!(
                error.contains(why) && error.contains("spec.dbName"),
                "{bad}: {error}"
            );
        }
    }
}
