//! Who the server takes a caller for (issue #14, authentication): `kubectl auth whoami`
//! (a `SelfSubjectReview`) for the admin and for users of `--token-auth-file`, in
//! kube-apiserver's CSV format; a bad token file stops the server with the line named.
//! Every wait is bounded; everything runs on 127.0.0.1.

mod common;

use common::{Env, binary};
use finale_e2e::FinaleServer;
use serde_json::Value;

fn whoami(env: &Env, extra: &[&str]) -> Value {
    let mut args = vec!["auth", "whoami", "-o", "json"];
    args.extend(extra);
    serde_json::from_str(&env.ok(&args)).expect("whoami prints JSON")
}

#[test]
fn whoami_names_the_admin_and_the_users_of_a_token_file() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "# name, then uid, then groups\n\
         alice-token,alice,1001,\"dev,ops\"\n\
         bob-token,bob,1002\n",
    )
    .expect("write the token file");
    let env = Env::start_with(&["--token-auth-file", tokens.to_str().expect("UTF-8 path")]);

    let admin = whoami(&env, &[]);
    assert_eq!(admin["kind"], "SelfSubjectReview", "{admin}");
    assert_eq!(admin["apiVersion"], "authentication.k8s.io/v1", "{admin}");
    assert_eq!(admin["status"]["userInfo"]["username"], "admin", "{admin}");
    assert_eq!(
        admin["status"]["userInfo"]["groups"],
        serde_json::json!(["system:masters", "system:authenticated"])
    );

    let alice = whoami(&env, &["--token", "alice-token"]);
    assert_eq!(
        alice["status"]["userInfo"],
        serde_json::json!({"username": "alice", "uid": "1001",
            "groups": ["dev", "ops", "system:authenticated"]}),
        "{alice}"
    );
    let bob = whoami(&env, &["--token", "bob-token"]);
    assert_eq!(bob["status"]["userInfo"]["username"], "bob", "{bob}");
    // The table kubectl prints by default.
    let table = env.ok(&["auth", "whoami", "--token", "bob-token"]);
    assert!(
        table.contains("Username") && table.contains("bob") && table.contains("1002"),
        "{table}"
    );

    // A token the file does not hold is refused, as before.
    let refused = env
        .kubectl
        .run(&["auth", "whoami", "--token", "carol-token"])
        .expect("run kubectl");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("You must be logged in to the server")
            && stderr.contains("invalid bearer token"),
        "{stderr}"
    );
    // The review is create-only: nothing is stored, nothing to list.
    let listed = env
        .kubectl
        .run(&["get", "selfsubjectreviews"])
        .expect("run kubectl");
    assert!(!listed.status.success(), "a review cannot be listed");
}

#[test]
fn a_bad_token_file_stops_the_server_naming_the_line() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "alice-token,alice,1001\nbob-token,bob\n").expect("write");
    let data = dir.path().join("data");
    let error = match FinaleServer::start_with(
        binary(),
        &data,
        "127.0.0.1:0",
        &["--token-auth-file", tokens.to_str().expect("UTF-8 path")],
    ) {
        Ok(_) => panic!("the server started with a two-column token line"),
        Err(error) => format!("{error:#}"),
    };
    assert!(error.contains("exit status: 1"), "it exits 1: {error}");
    let log = std::fs::read_to_string(data.join("server.log")).expect("server log");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("Error: --token-auth-file ")
            && last.contains(
                "line 2: must have at least 3 columns (token, user name, user uid), found 2"
            ),
        "the last line names the file and the line: {log}"
    );
}
