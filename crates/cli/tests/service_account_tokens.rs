//! Service-account tokens (issue #14, authentication): `kubectl create token` issues a bound
//! JWT that authenticates as `system:serviceaccount:NS:NAME` under RBAC, for its audiences and
//! lifetime only, until its ServiceAccount (or bound Pod) is deleted or re-created; a
//! `TokenReview` answers who a token stands for. Bad input gets upstream's errors.
//! Every wait is bounded; everything runs on 127.0.0.1.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::{Api, Env, eventually};
use serde_json::{Value, json};

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The claims of a JWT (read, not verified: the server verifies).
fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT has three parts");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url payload");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

fn create_token(env: &Env, args: &[&str]) -> String {
    let mut all = vec!["create", "token"];
    all.extend_from_slice(args);
    env.ok(&all).trim().to_string()
}

fn whoami(env: &Env, token: &str) -> Result<Value, String> {
    let run = env.run(&["auth", "whoami", "-o", "json", "--token", token]);
    if run.code == Some(0) {
        Ok(serde_json::from_str(&run.stdout).expect("whoami prints JSON"))
    } else {
        Err(run.stderr)
    }
}

/// A review's answer: 201 with the review and its status.
fn created(response: &common::Response) -> Value {
    assert_eq!(response.status, 201, "{}", response.body);
    response.json()
}

fn uid_of(env: &Env, args: &[&str]) -> String {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend(["-o", "jsonpath={.metadata.uid}"]);
    env.ok(&all).trim().to_string()
}

#[test]
fn a_token_acts_as_its_service_account_under_rbac_until_the_account_is_deleted_or_recreated() {
    let env = Env::start();
    env.ok(&["create", "namespace", "t"]);
    env.ok(&["create", "serviceaccount", "x", "-n", "t"]);
    env.ok(&[
        "create",
        "configmap",
        "seed",
        "-n",
        "t",
        "--from-literal=k=v",
    ]);
    let account_uid = uid_of(&env, &["serviceaccount", "x", "-n", "t"]);

    let token = create_token(&env, &["x", "-n", "t", "--duration", "15m"]);
    let claims = claims(&token);
    assert_eq!(claims["iss"], ISSUER, "{claims}");
    assert_eq!(claims["sub"], "system:serviceaccount:t:x", "{claims}");
    assert_eq!(claims["aud"], json!([ISSUER]), "{claims}");
    assert_eq!(
        claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(),
        900,
        "--duration 15m: {claims}"
    );
    assert_eq!(
        claims["kubernetes.io"]["serviceaccount"],
        json!({"name": "x", "uid": account_uid})
    );

    // Who the server takes the token for: upstream's user info of a service account.
    let me = whoami(&env, &token).expect("the token authenticates");
    let user = &me["status"]["userInfo"];
    assert_eq!(user["username"], "system:serviceaccount:t:x", "{me}");
    assert_eq!(user["uid"], account_uid.as_str(), "{me}");
    assert_eq!(
        user["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:t",
            "system:authenticated"
        ])
    );
    let credential = user["extra"]["authentication.kubernetes.io/credential-id"][0]
        .as_str()
        .unwrap_or_default();
    assert_eq!(
        credential,
        format!("JTI={}", claims["jti"].as_str().unwrap())
    );

    // Under RBAC: nothing granted yet, so a list is refused with upstream's words…
    let refused = env.run(&["get", "configmaps", "-n", "t", "--token", &token]);
    assert!(
        refused.stderr.contains(
            "User \"system:serviceaccount:t:x\" cannot list resource \"configmaps\" in API \
             group \"\" in the namespace \"t\""
        ),
        "{}",
        refused.describe()
    );
    // …until a RoleBinding names the service account.
    env.ok(&[
        "create",
        "rolebinding",
        "x-view",
        "-n",
        "t",
        "--clusterrole=view",
        "--serviceaccount=t:x",
    ]);
    let listed = eventually(Duration::from_secs(10), || {
        let run = env.run(&[
            "get",
            "configmaps",
            "-n",
            "t",
            "-o",
            "name",
            "--token",
            &token,
        ]);
        (run.code == Some(0)).then_some(run.stdout)
    })
    .unwrap_or_else(|| panic!("the grant never reached the authorizer{}", env.log()));
    assert!(listed.contains("configmap/seed"), "{listed}");
    // The namespace's group binding grants as well (the groups are real).
    let can = env.run(&[
        "auth",
        "can-i",
        "list",
        "configmaps",
        "-n",
        "t",
        "--token",
        &token,
    ]);
    assert_eq!(can.stdout.trim(), "yes", "{}", can.describe());

    // Deleting the ServiceAccount invalidates its tokens as soon as the server's watch cache
    // has seen the delete (milliseconds; upstream's validator reads an informer likewise).
    env.ok(&["delete", "serviceaccount", "x", "-n", "t"]);
    let gone = eventually(Duration::from_secs(5), || whoami(&env, &token).err())
        .unwrap_or_else(|| panic!("a deleted account's token still works{}", env.log()));
    assert!(
        gone.contains("You must be logged in")
            && gone.contains("service account t/x no longer exists"),
        "{gone}"
    );
    // Re-created with the same name, it is another account: the old token stays refused.
    env.ok(&["create", "serviceaccount", "x", "-n", "t"]);
    let recreated = eventually(Duration::from_secs(5), || {
        whoami(&env, &token)
            .err()
            .filter(|e| e.contains("does not match claim"))
    })
    .unwrap_or_else(|| {
        panic!(
            "a re-created account's old token is not refused as such{}",
            env.log()
        )
    });
    assert!(
        recreated.contains("does not match claim"),
        "{recreated}{}",
        env.log()
    );
    // A token of the new account works.
    let fresh = create_token(&env, &["x", "-n", "t"]);
    let me = whoami(&env, &fresh).expect("a fresh token authenticates");
    assert_ne!(me["status"]["userInfo"]["uid"], account_uid.as_str());
}

#[test]
fn audiences_expiry_tampering_and_token_reviews() {
    let env = Env::start();
    env.ok(&["create", "namespace", "t"]);
    env.ok(&["create", "serviceaccount", "x", "-n", "t"]);
    let admin = Api::new(&env.server).expect("admin client");

    // A token for another audience does not authenticate to the API server…
    let vault = create_token(&env, &["x", "-n", "t", "--audience", "vault"]);
    let refused = whoami(&env, &vault).expect_err("a token for vault");
    assert!(
        refused.contains(&format!(
            "token audiences [\\\"vault\\\"] is invalid for the target audiences [\\\"{ISSUER}\\\"]"
        )) || refused.contains(&format!(
            "token audiences [\"vault\"] is invalid for the target audiences [\"{ISSUER}\"]"
        )),
        "{refused}"
    );
    // …but a TokenReview for that audience says whose it is.
    let review = admin
        .post_json(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": vault, "audiences": ["vault"]}}),
        )
        .expect("post a TokenReview");
    let answer = created(&review);
    assert_eq!(answer["status"]["authenticated"], true, "{answer}");
    assert_eq!(
        answer["status"]["user"]["username"],
        "system:serviceaccount:t:x"
    );
    assert_eq!(answer["status"]["audiences"], json!(["vault"]), "{answer}");
    // Without audiences the review asks for the API server's: not this token's.
    let review = admin
        .post_json(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": vault}}),
        )
        .expect("post a TokenReview");
    let answer = created(&review);
    assert!(answer["status"].get("authenticated").is_none(), "{answer}");
    assert!(
        answer["status"]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("is invalid for the target audiences"),
        "{answer}"
    );
    // A review without a token is bad input.
    let review = admin
        .post_json(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}}),
        )
        .expect("post a TokenReview");
    let status = review.expect_status(400, "BadRequest");
    assert_eq!(
        status["message"],
        "token is required for TokenReview in authentication"
    );
    // Reviews need their own permission: a service account has none.
    let token = create_token(&env, &["x", "-n", "t"]);
    let as_account = Api::with_token(&env.server, Some(token.clone())).expect("client");
    let denied = as_account
        .post_json(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                    "spec": {"token": vault}}),
        )
        .expect("post a TokenReview");
    denied.expect_status(403, "Forbidden");

    // An expired token, signed with the server's own key, is refused as expired.
    let key = std::fs::read(env.server.data_dir.join("pki/sa.key")).expect("read sa.key");
    let mut expired = claims(&token);
    let now = expired["iat"].as_i64().unwrap();
    expired["iat"] = json!(now - 7200);
    expired["nbf"] = json!(now - 7200);
    expired["exp"] = json!(now - 3600);
    let expired = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
        &expired,
        &jsonwebtoken::EncodingKey::from_ec_pem(&key).expect("the server's key"),
    )
    .expect("sign");
    let refused = whoami(&env, &expired).expect_err("an expired token");
    assert!(
        refused.contains("service account token has expired"),
        "{refused}"
    );

    // A token whose claims were changed after signing is refused.
    let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
    let mut forged = claims(&token);
    forged["kubernetes.io"]["serviceaccount"]["name"] = json!("admin");
    forged["sub"] = json!("system:serviceaccount:t:admin");
    parts[1] = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&forged).expect("JSON"));
    let refused = whoami(&env, &parts.join(".")).expect_err("a forged token");
    assert!(refused.contains("invalid signature"), "{refused}");
    // Garbage is simply not a token of this server.
    let refused = whoami(&env, "not.a.jwt").expect_err("garbage");
    assert!(refused.contains("You must be logged in"), "{refused}");
}

#[test]
fn token_requests_check_their_input_and_their_bound_pod() {
    let env = Env::start();
    env.ok(&["create", "namespace", "t"]);
    env.ok(&["create", "serviceaccount", "x", "-n", "t"]);
    env.ok(&["create", "serviceaccount", "other", "-n", "t"]);

    // Too short a lifetime: 422 with upstream's message, nothing issued.
    let short = env.run(&["create", "token", "x", "-n", "t", "--duration", "1m"]);
    assert_eq!(short.code, Some(1), "{}", short.describe());
    assert!(
        short
            .stderr
            .contains("may not specify a duration less than 10 minutes"),
        "{}",
        short.describe()
    );
    assert!(short.stdout.trim().is_empty(), "{}", short.describe());
    // A ServiceAccount that does not exist.
    let missing = env.run(&["create", "token", "nope", "-n", "t"]);
    assert!(
        missing
            .stderr
            .contains("serviceaccounts \"nope\" not found"),
        "{}",
        missing.describe()
    );

    // Bound to a Pod: valid while the Pod is, and only for the Pod's own account.
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "t"},
            "spec": {"serviceAccountName": "x", "containers": [{"name": "c", "image": "busybox"}]}}"#,
    );
    let wrong = env.run(&[
        "create",
        "token",
        "other",
        "-n",
        "t",
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        "p",
    ]);
    assert!(
        wrong.stderr.contains(
            "cannot bind token for serviceaccount \"other\" to pod running with serviceaccount \"x\""
        ),
        "{}",
        wrong.describe()
    );
    let pod_uid = uid_of(&env, &["pod", "p", "-n", "t"]);
    let bound = create_token(
        &env,
        &[
            "x",
            "-n",
            "t",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "p",
        ],
    );
    assert_eq!(
        claims(&bound)["kubernetes.io"]["pod"],
        json!({"name": "p", "uid": pod_uid})
    );
    let me = whoami(&env, &bound).expect("a pod-bound token authenticates");
    let extra = &me["status"]["userInfo"]["extra"];
    assert_eq!(extra["authentication.kubernetes.io/pod-name"], json!(["p"]));
    assert_eq!(
        extra["authentication.kubernetes.io/pod-uid"],
        json!([pod_uid])
    );
    // A stale uid in the request is a conflict.
    let stale = env.run(&[
        "create",
        "token",
        "x",
        "-n",
        "t",
        "--bound-object-kind",
        "Pod",
        "--bound-object-name",
        "p",
        "--bound-object-uid",
        "00000000-0000-0000-0000-000000000000",
    ]);
    assert!(
        stale.stderr.contains("does not match the UID in record"),
        "{}",
        stale.describe()
    );
    // Once the Pod is gone, so is its token; the account's unbound tokens still work.
    let unbound = create_token(&env, &["x", "-n", "t"]);
    env.ok(&[
        "delete",
        "pod",
        "p",
        "-n",
        "t",
        "--grace-period=0",
        "--force",
    ]);
    let gone = whoami(&env, &bound).expect_err("the pod's token after the pod");
    assert!(gone.contains("pod t/p no longer exists"), "{gone}");
    whoami(&env, &unbound).expect("the unbound token still works");
}
