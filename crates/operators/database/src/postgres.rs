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
//!
//! # Creating a database recoverably
//! `CREATE DATABASE` cannot run in a transaction, so it and its tagging `COMMENT` are two
//! statements, and a failure between them would leave an untagged database nobody could prove
//! was Finale's. The database is therefore created under a *staging name* that only this object
//! can produce ([`staging_name`]: a reserved prefix and the object's uid, a name
//! [`validate_name`] refuses for any `spec.dbName`), then tagged, then renamed to its real
//! name. A retry after a failure at any point finds the staging database and carries on:
//! its name is the proof of ownership until the tag is there, and the rename is atomic, so
//! the real name only ever appears tagged. A database under the real name that carries no tag
//! is someone else's, and stays untouched.
//!
//! A role is created and tagged in one implicit transaction (one simple-query message), so
//! there is no such window for roles.
//!
//! # Bounds
//! Every session starts with `statement_timeout` and `lock_timeout` ([`Timeouts`]); every call
//! is also bounded on the client side, since a server-side timeout cannot help when the
//! network itself hangs. After a client-side timeout the connection is abandoned: its I/O task
//! is aborted when the [`PgServer`] is dropped.

use std::time::Duration;

use postgres_protocol::escape::{escape_identifier, escape_literal};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use crate::connection::{self, SslMode, Timeouts};

/// The prefix of the comment that marks a database as one Database object's.
const TAG_PREFIX: &str = "finale.dev/owner-uid=";
/// The comment prefix of a role Finale created.
pub const ROLE_TAG: &str = "finale.dev/managed-role";
/// The prefix of a database's name while it is being created (see the module docs).
pub const STAGING_PREFIX: &str = "finale_staging_";

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("the connection URL is not valid: {0}")]
    BadUrl(String),
    #[error("the TLS settings are not usable: {0}")]
    Tls(String),
    #[error("cannot connect to PostgreSQL at {server}")]
    Connect {
        server: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("PostgreSQL at {server} did not answer within {after:?} while connecting")]
    ConnectTimeout { server: String, after: Duration },
    #[error("PostgreSQL refused `{statement}`")]
    Statement {
        statement: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error(
        "PostgreSQL at {server} did not answer `{statement}` within {after:?}; the connection is given up"
    )]
    StatementTimeout {
        server: String,
        statement: String,
        after: Duration,
    },
}

/// Whether waiting may fix an error, and if not, what a person should change.
#[derive(Debug, PartialEq, Eq)]
pub enum Class {
    /// The server is down, restarting, overloaded, slow or busy: retry with backoff.
    Transient,
    /// Waiting will not help; the text says what to fix.
    Permanent(&'static str),
}

const FIX_URL: &str = "fix the connection URL in the Secret \
    (postgres://user:password@host:port/database?sslmode=…)";
const FIX_CA: &str = "put the PEM certificate of the CA that signed the server's certificate \
    under ca.crt in the Secret";
const FIX_PASSWORD: &str = "the user or password in the Secret's URL is wrong: fix it there";
const FIX_HBA: &str = "the server refuses this connection (its pg_hba.conf, or a role that may \
    not log in): check the user, the database and the sslmode in the Secret's URL against the \
    server's rules";
const FIX_DATABASE: &str = "the database in the Secret's URL does not exist: name an existing one, \
    such as /postgres";
const FIX_PRIVILEGE: &str = "the URL's user lacks a privilege: it needs CREATEDB and CREATEROLE \
    (or to be a superuser)";
const FIX_NAME: &str = "PostgreSQL refused a name: check spec.dbName and spec.owner";
const FIX_CERTIFICATE: &str = "the server's certificate does not verify: put the CA that signed it \
    under ca.crt in the Secret, connect with the host name the certificate names, or use a \
    weaker sslmode";
const FIX_NO_TLS: &str = "the server does not offer TLS: turn ssl on at the server, or use \
    sslmode=prefer or disable";
const FIX_CONFIG: &str = "the connection settings are incomplete (for example a password the \
    server asks for is missing from the URL): fix the Secret";

impl PgError {
    /// Sorts the error: a person must fix bad credentials, missing privileges, invalid names,
    /// a missing database in the URL or a certificate that does not verify; everything else
    /// (refused or reset connections, timeouts, shutdowns, overload, conflicts) may pass.
    pub fn class(&self) -> Class {
        let source = match self {
            PgError::ConnectTimeout { .. } | PgError::StatementTimeout { .. } => {
                return Class::Transient;
            }
            PgError::BadUrl(_) => return Class::Permanent(FIX_URL),
            PgError::Tls(_) => return Class::Permanent(FIX_CA),
            PgError::Connect { source, .. } | PgError::Statement { source, .. } => source,
        };
        if let Some(code) = source.code() {
            return class_of_sqlstate(code);
        }
        if let Some(tls) = rustls_error(source) {
            return match tls {
                rustls::Error::InvalidCertificate(_)
                | rustls::Error::UnsupportedNameType
                | rustls::Error::PeerIncompatible(_) => Class::Permanent(FIX_CERTIFICATE),
                _ => Class::Transient,
            };
        }
        // tokio-postgres keeps its error kinds private; its messages are stable.
        let text = source.to_string();
        let cause = std::error::Error::source(source)
            .map(|c| c.to_string())
            .unwrap_or_default();
        if cause.contains("server does not support TLS") {
            Class::Permanent(FIX_NO_TLS)
        } else if text.starts_with("invalid configuration")
            || text.starts_with("invalid connection string")
            || text.starts_with("authentication error")
        {
            Class::Permanent(FIX_CONFIG)
        } else {
            Class::Transient
        }
    }

    /// Whether waiting may fix it.
    pub fn is_transient(&self) -> bool {
        self.class() == Class::Transient
    }
}

/// SQLSTATE classes: 28 (authorization), 3D (no such database), 42 (privilege, names) are
/// permanent; 08, 40, 53, 55, 57 and 58 and anything unknown are treated as passing.
fn class_of_sqlstate(code: &SqlState) -> Class {
    match code.code() {
        "28P01" => Class::Permanent(FIX_PASSWORD),
        c if c.starts_with("28") => Class::Permanent(FIX_HBA),
        c if c.starts_with("3D") => Class::Permanent(FIX_DATABASE),
        "42501" => Class::Permanent(FIX_PRIVILEGE),
        c if c.starts_with("42") => Class::Permanent(FIX_NAME),
        _ => Class::Transient,
    }
}

/// The rustls error behind a failed TLS handshake, if that is what it was: tokio-postgres wraps
/// the connector's `io::Error`, which wraps the rustls error.
fn rustls_error(error: &tokio_postgres::Error) -> Option<&rustls::Error> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(current) = cause {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(tls) = inner.downcast_ref::<rustls::Error>()
        {
            return Some(tls);
        }
        cause = current.source();
    }
    None
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
    if name.starts_with(STAGING_PREFIX) {
        return Err(format!(
            "{field} {name:?} is reserved: Finale names databases {STAGING_PREFIX}… while it creates them; choose another name"
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

/// The name a database has while this object creates it: [`STAGING_PREFIX`] and the object's
/// uid (its letters and digits), a name no `spec.dbName` may take.
pub fn staging_name(owner_uid: &str) -> String {
    let mut name = STAGING_PREFIX.to_string();
    name.extend(
        owner_uid
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase()),
    );
    name.truncate(63);
    name
}

/// A connection to one PostgreSQL server, as a role that may create roles and databases.
pub struct PgServer {
    client: Client,
    server: String,
    per_call: Duration,
    /// The task doing the connection's I/O; aborted on drop, so a connection whose network
    /// hangs does not outlive its use.
    io: tokio::task::JoinHandle<()>,
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.io.abort();
    }
}

/// Connects with the URL from the Database's Secret (and the CA from it, if any), within
/// `timeouts.connect`.
pub async fn connect(
    url: &str,
    ca_pem: Option<&[u8]>,
    timeouts: &Timeouts,
) -> Result<PgServer, PgError> {
    let target = connection::parse(url, timeouts).map_err(PgError::BadUrl)?;
    let server = target.server.clone();
    let tls = connection::tls_config(target.sslmode, ca_pem).map_err(PgError::Tls)?;
    let tls = tokio_postgres_rustls::MakeRustlsConnect::new(tls);
    if target.sslmode == SslMode::Disable && ca_pem.is_some() {
        tracing::debug!(%server, "sslmode=disable: the Secret's CA is not used");
    }
    let (client, connection) = tokio::time::timeout(timeouts.connect, target.config.connect(tls))
        .await
        .map_err(|_| PgError::ConnectTimeout {
            server: server.clone(),
            after: timeouts.connect,
        })?
        .map_err(|source| PgError::Connect {
            server: server.clone(),
            source,
        })?;
    // tokio-postgres does its I/O in this future; it ends when the client is dropped, or is
    // aborted with the PgServer.
    let io = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "PostgreSQL connection closed");
        }
    });
    Ok(PgServer {
        client,
        server,
        per_call: timeouts.per_call(),
        io,
    })
}

impl PgServer {
    /// `host:port` of the server, for messages.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Bounds `call` on the client side.
    async fn bounded<T>(
        &self,
        statement: &str,
        call: impl Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, PgError> {
        match tokio::time::timeout(self.per_call, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(PgError::Statement {
                statement: statement.to_string(),
                source,
            }),
            Err(_) => Err(PgError::StatementTimeout {
                server: self.server.clone(),
                statement: statement.to_string(),
                after: self.per_call,
            }),
        }
    }

    async fn execute(&self, statement: String) -> Result<(), PgError> {
        self.bounded(&statement, self.client.batch_execute(&statement))
            .await
    }

    async fn query(&self, query: &str, name: &str) -> Result<Vec<tokio_postgres::Row>, PgError> {
        self.bounded(query, self.client.query(query, &[&name]))
            .await
    }

    async fn comment_of(&self, query: &str, name: &str) -> Result<Option<Option<String>>, PgError> {
        let rows = self.query(query, name).await?;
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
        let rows = self.query(query, database).await?;
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

    /// Creates the role (without login: it only owns) unless it exists. The role and its tag
    /// are one implicit transaction: either both are there or neither.
    pub async fn ensure_role(&self, role: &str, owner_uid: &str) -> Result<RoleState, PgError> {
        let ident = escape_identifier(role);
        let create = format!(
            "CREATE ROLE {ident} NOLOGIN; COMMENT ON ROLE {ident} IS {}",
            escape_literal(&format!("{ROLE_TAG} created-for={owner_uid}"))
        );
        match self.execute(create).await {
            Ok(()) => Ok(RoleState::Created),
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

    /// Creates the database owned by `owner` unless it exists (through its staging name: see
    /// the module docs); converges the owner of a database that is ours.
    pub async fn ensure_database(
        &self,
        database: &str,
        owner: &str,
        owner_uid: &str,
    ) -> Result<DatabaseState, PgError> {
        let ident = escape_identifier(database);
        let owner_ident = escape_identifier(owner);
        match self.inspect_database(database, owner, owner_uid).await? {
            Some((state @ DatabaseState::Foreign { .. }, _)) => return Ok(state),
            Some((_, true)) => return Ok(DatabaseState::Ours),
            Some((_, false)) => {
                self.execute(format!("ALTER DATABASE {ident} OWNER TO {owner_ident}"))
                    .await?;
                return Ok(DatabaseState::Ours);
            }
            None => {}
        }
        let tag = tag(owner_uid);
        let staging = staging_name(owner_uid);
        let staging_ident = escape_identifier(&staging);
        let staged = match self.database_comment(&staging).await? {
            Some(comment) => comment,
            None => {
                match self
                    .execute(format!(
                        "CREATE DATABASE {staging_ident} OWNER {owner_ident}"
                    ))
                    .await
                {
                    Ok(()) => None,
                    // Created meanwhile by an earlier attempt still running (a lost leader).
                    Err(PgError::Statement { source, .. })
                        if source.code() == Some(&SqlState::DUPLICATE_DATABASE) =>
                    {
                        self.database_comment(&staging).await?.flatten()
                    }
                    Err(other) => return Err(other),
                }
            }
        };
        match staged.as_deref() {
            // Untagged under the staging name: its name proves it is this object's.
            None => {
                self.execute(format!(
                    "COMMENT ON DATABASE {staging_ident} IS {}",
                    escape_literal(&tag)
                ))
                .await?;
            }
            Some(comment) if comment == tag => {}
            // Tagged by someone else under a name only this object should use: leave it.
            Some(_) => return Ok(DatabaseState::Foreign { comment: staged }),
        }
        match self
            .execute(format!("ALTER DATABASE {staging_ident} RENAME TO {ident}"))
            .await
        {
            Ok(()) => Ok(DatabaseState::Created),
            // Someone created the real name meanwhile: theirs; ours stays staged until the
            // object's teardown drops it.
            Err(PgError::Statement { source, .. })
                if source.code() == Some(&SqlState::DUPLICATE_DATABASE) =>
            {
                Ok(DatabaseState::Foreign {
                    comment: self.database_comment(database).await?.flatten(),
                })
            }
            Err(other) => Err(other),
        }
    }

    /// Drops the database if it is ours, and its staging twin if a creation was interrupted.
    pub async fn drop_database(
        &self,
        database: &str,
        owner_uid: &str,
    ) -> Result<DropOutcome, PgError> {
        let tag = tag(owner_uid);
        let staging = staging_name(owner_uid);
        let staged = self.database_comment(&staging).await?;
        let staged_dropped = match staged {
            Some(None) => true,
            Some(Some(ref comment)) => *comment == tag,
            None => false,
        };
        if staged_dropped {
            self.drop_named(&staging).await?;
        }
        let Some(comment) = self.database_comment(database).await? else {
            return Ok(if staged_dropped {
                DropOutcome::Dropped
            } else {
                DropOutcome::AlreadyGone
            });
        };
        if comment.as_deref() != Some(tag.as_str()) {
            return Ok(DropOutcome::NotOurs);
        }
        self.drop_named(database).await?;
        Ok(DropOutcome::Dropped)
    }

    /// Closes every session on the database and drops it.
    async fn drop_named(&self, database: &str) -> Result<(), PgError> {
        let ident = escape_identifier(database);
        // Refuse new sessions first, then end the open ones: WITH (FORCE) does both on
        // PostgreSQL 13+, and the explicit steps keep older servers working.
        self.execute(format!("ALTER DATABASE {ident} ALLOW_CONNECTIONS false"))
            .await?;
        let terminate = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE datname = $1 AND pid <> pg_backend_pid()";
        self.query(terminate, database).await?;
        let version = self
            .bounded(
                "SHOW server_version_num",
                self.client.query_one("SHOW server_version_num", &[]),
            )
            .await;
        let force = version
            .ok()
            .and_then(|row| row.get::<_, String>(0).parse::<u32>().ok())
            .is_some_and(|v| v >= 130_000);
        let statement = if force {
            format!("DROP DATABASE IF EXISTS {ident} WITH (FORCE)")
        } else {
            format!("DROP DATABASE IF EXISTS {ident}")
        };
        self.execute(statement).await
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
    fn a_staging_name_is_the_reserved_prefix_and_the_uid() {
        let name = staging_name("6F2C1A9E-0B1d-4e4f-9a3b-2c7d8e9f0a1b");
        assert_eq!(name, "finale_staging_6f2c1a9e0b1d4e4f9a3b2c7d8e9f0a1b");
        assert!(name.len() <= 63);
        assert!(validate_name("spec.dbName", &name).is_err());
        assert!(staging_name(&"x".repeat(80)).len() == 63);
    }

    #[test]
    fn sqlstates_are_sorted_into_permanent_and_transient() {
        for (code, permanent) in [
            (SqlState::INVALID_PASSWORD, true),
            (SqlState::INVALID_AUTHORIZATION_SPECIFICATION, true),
            (SqlState::INVALID_CATALOG_NAME, true),
            (SqlState::INSUFFICIENT_PRIVILEGE, true),
            (SqlState::INVALID_NAME, true),
            (SqlState::RESERVED_NAME, true),
            (SqlState::ADMIN_SHUTDOWN, false),
            (SqlState::CRASH_SHUTDOWN, false),
            (SqlState::CANNOT_CONNECT_NOW, false),
            (SqlState::TOO_MANY_CONNECTIONS, false),
            (SqlState::DISK_FULL, false),
            (SqlState::T_R_SERIALIZATION_FAILURE, false),
            (SqlState::T_R_DEADLOCK_DETECTED, false),
            (SqlState::LOCK_NOT_AVAILABLE, false),
            (SqlState::OBJECT_IN_USE, false),
            (SqlState::QUERY_CANCELED, false),
            (SqlState::CONNECTION_FAILURE, false),
        ] {
            assert_eq!(
                matches!(class_of_sqlstate(&code), Class::Permanent(_)),
                permanent,
                "{}",
                code.code()
            );
        }
        assert_eq!(
            class_of_sqlstate(&SqlState::INVALID_PASSWORD),
            Class::Permanent(FIX_PASSWORD)
        );
    }

    #[test]
    fn errors_without_a_server_are_sorted_too() {
        let timeout = PgError::StatementTimeout {
            server: "db:5432".into(),
            statement: "DROP DATABASE x".into(),
            after: Duration::from_secs(65),
        };
        assert!(timeout.is_transient());
        assert!(
            timeout
                .to_string()
                .contains("did not answer `DROP DATABASE x` within 65s")
        );
        assert!(
            PgError::ConnectTimeout {
                server: "db:5432".into(),
                after: Duration::from_secs(10)
            }
            .is_transient()
        );
        assert_eq!(
            PgError::BadUrl("x".into()).class(),
            Class::Permanent(FIX_URL)
        );
        assert_eq!(PgError::Tls("x".into()).class(), Class::Permanent(FIX_CA));
    }

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
            ("finale_staging_0f9e", "reserved: Finale names"),
        ] {
            let error = validate_name("spec.dbName", bad).expect_err(bad);
            assert!(
                error.contains(why) && error.contains("spec.dbName"),
                "{bad}: {error}"
            );
        }
    }
}
