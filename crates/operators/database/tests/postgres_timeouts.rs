//! The SQL layer against a real PostgreSQL whose network stops answering mid-session: a loopback
//! proxy between the two that stops forwarding (a hang the server itself cannot be made to
//! show). Every call must come back with an error within its bound.

use std::time::{Duration, Instant};

use finale_e2e::{Postgres, StallProxy};
use finale_operator_database::{Timeouts, postgres};

const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(3),
    statement: Duration::from_secs(2),
    lock: Duration::from_secs(1),
};

#[tokio::test]
async fn a_statement_on_a_connection_that_stops_answering_times_out() {
    let server = Postgres::start().expect("start PostgreSQL");
    let proxy = StallProxy::start(([127, 0, 0, 1], server.port()).into()).expect("start the proxy");
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
    let session = postgres::connect(&url, None, &TIMEOUTS)
        .await
        .expect("connect through the proxy");
    assert!(
        !session.database_exists("absent").await.expect("a read"),
        "the session works before the stall"
    );

    proxy.stall();
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        session.drop_database("absent", "some-uid"),
    )
    .await;
    let error = outcome
        .expect("the call gives up on its own, within its bound")
        .expect_err("a hung call is an error");
    assert!(
        error.to_string().contains("did not answer"),
        "the error says what happened: {error}"
    );
    // The statement timeout and the client's grace, with room for a loaded machine.
    assert!(
        started.elapsed() < TIMEOUTS.per_call() + Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn connecting_to_a_server_that_stops_answering_times_out() {
    let server = Postgres::start().expect("start PostgreSQL");
    let proxy = StallProxy::start(([127, 0, 0, 1], server.port()).into()).expect("start the proxy");
    proxy.stall();
    let url = format!("postgres://postgres@127.0.0.1:{}/postgres", proxy.port());
    let started = Instant::now();
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        postgres::connect(&url, None, &TIMEOUTS),
    )
    .await
    .expect("gives up on its own")
    .err()
    .expect("a hung connection attempt is an error");
    assert!(error.to_string().contains("while connecting"), "{error}");
    assert!(error.is_transient(), "a hang may pass: {error}");
    assert!(started.elapsed() < TIMEOUTS.connect + Duration::from_secs(5));

    // Once the network answers again, so does the server.
    proxy.resume();
    let session = postgres::connect(&url, None, &TIMEOUTS)
        .await
        .expect("connect after the stall");
    assert!(!session.database_exists("absent").await.expect("a read"));
}

#[tokio::test]
async fn a_statement_waiting_on_a_lock_gives_up_at_the_lock_timeout() {
    let server = Postgres::start().expect("start PostgreSQL");
    let session = postgres::connect(&server.url(), None, &TIMEOUTS)
        .await
        .expect("connect");
    assert_eq!(
        session
            .ensure_database("held", "postgres", "uid-1")
            .await
            .expect("create"),
        postgres::DatabaseState::Created
    );
    let (blocker, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .expect("a second session");
    tokio::spawn(connection);
    blocker
        .batch_execute("BEGIN; LOCK TABLE pg_shdescription IN EXCLUSIVE MODE")
        .await
        .expect("take the lock DROP DATABASE needs");
    let started = Instant::now();
    let error = session
        .drop_database("held", "uid-1")
        .await
        .expect_err("the drop cannot get its lock");
    let text = format!("{:#}", anyhow::Error::new(error));
    assert!(text.contains("lock timeout"), "{text}");
    assert!(
        started.elapsed() < TIMEOUTS.per_call(),
        "{:?}",
        started.elapsed()
    );
    blocker.batch_execute("ROLLBACK").await.expect("release");
    assert_eq!(
        session.drop_database("held", "uid-1").await.expect("drop"),
        postgres::DropOutcome::Dropped
    );
}
