//! RBAC (issue #14, authorization): identities from `--token-auth-file` act through kubectl
//! and kube-rs under the bootstrap roles and custom ones, as on kube-apiserver 1.33:
//! `kubectl auth can-i` and the real requests agree, denials are upstream's 403 messages,
//! aggregation fills `admin`/`edit`/`view`, escalation is refused, impersonation needs the
//! `impersonate` verb, and `blockOwnerDeletion` needs the owner's finalizers (O5).
//!
//! A grant reaches the authorizer through its watch; tests wait for it with a bounded poll
//! of `can-i`, and prove a refusal only after a later grant (a sentinel) has arrived.

mod common;

use std::time::Duration;

use common::{Env, Run, eventually};
use serde_json::Value;

const TOKENS: &str = "\
viewer-token,viewer,1,\"readers\"
editor-token,editor,2
nsadmin-token,nsadmin,3,\"team-a-admins\"
nobody-token,nobody,4
imp-token,imp,5
";

fn start() -> Env {
    let dir = tempfile::tempdir().expect("temporary directory");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("write the token file");
    let env = Env::start_with(&["--token-auth-file", tokens.to_str().expect("UTF-8 path")]);
    // The token file is read at start; its directory may go.
    drop(dir);
    env
}

/// kubectl as the user of `token`.
fn as_user(env: &Env, token: &str, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--token", token]);
    env.run(&all)
}

fn can_i(env: &Env, token: &str, args: &[&str]) -> bool {
    let mut all = vec!["auth", "can-i"];
    all.extend_from_slice(args);
    let run = as_user(env, token, &all);
    match run.stdout.trim() {
        "yes" => true,
        answer if answer.starts_with("no") => false,
        _ => panic!(
            "can-i answered neither yes nor no: {}{}",
            run.describe(),
            env.log()
        ),
    }
}

/// Waits until `token` may do `args` (the grant has reached the authorizer).
fn wait_until_allowed(env: &Env, token: &str, args: &[&str]) {
    eventually(Duration::from_secs(10), || {
        can_i(env, token, args).then_some(())
    })
    .unwrap_or_else(|| panic!("{token} was never allowed {args:?}{}", env.log()));
}

fn forbidden(run: &Run) -> String {
    assert_eq!(run.code, Some(1), "{}", run.describe());
    assert!(
        run.stderr.contains("(Forbidden)") || run.stderr.contains("is forbidden"),
        "{}",
        run.describe()
    );
    run.stderr.trim().to_string()
}

fn setup_team_a(env: &Env) {
    env.ok(&["create", "namespace", "team-a"]);
    env.ok(&["create", "namespace", "team-b"]);
    env.ok(&[
        "create",
        "configmap",
        "seed",
        "-n",
        "team-a",
        "--from-literal=k=v",
    ]);
    env.ok(&[
        "create",
        "rolebinding",
        "readers-view",
        "-n",
        "team-a",
        "--clusterrole=view",
        "--group=readers",
    ]);
    env.ok(&[
        "create",
        "rolebinding",
        "editor-edit",
        "-n",
        "team-a",
        "--clusterrole=edit",
        "--user=editor",
    ]);
    env.ok(&[
        "create",
        "rolebinding",
        "admins",
        "-n",
        "team-a",
        "--clusterrole=admin",
        "--group=team-a-admins",
    ]);
    wait_until_allowed(env, "viewer-token", &["list", "configmaps", "-n", "team-a"]);
    wait_until_allowed(
        env,
        "editor-token",
        &["create", "configmaps", "-n", "team-a"],
    );
    wait_until_allowed(env, "nsadmin-token", &["create", "roles", "-n", "team-a"]);
}

#[test]
fn bootstrap_roles_answer_can_i_and_the_real_requests_alike() {
    let env = start();
    setup_team_a(&env);
    // (token, can-i arguments, expected): view < edit < admin, each confined to team-a.
    let table: &[(&str, &[&str], bool)] = &[
        (
            "viewer-token",
            &["get", "configmaps/seed", "-n", "team-a"],
            true,
        ),
        (
            "viewer-token",
            &["watch", "configmaps", "-n", "team-a"],
            true,
        ),
        ("viewer-token", &["list", "secrets", "-n", "team-a"], false),
        (
            "viewer-token",
            &["create", "configmaps", "-n", "team-a"],
            false,
        ),
        (
            "viewer-token",
            &["list", "configmaps", "-n", "team-b"],
            false,
        ),
        (
            "viewer-token",
            &["get", "namespaces/team-a", "-n", "team-b"],
            false,
        ),
        (
            "viewer-token",
            &["get", "namespaces/team-a", "-n", "team-a"],
            true,
        ),
        (
            "editor-token",
            &["create", "configmaps", "-n", "team-a"],
            true,
        ),
        ("editor-token", &["delete", "secrets", "-n", "team-a"], true),
        (
            "editor-token",
            &[
                "update",
                "deployments.apps",
                "--subresource=scale",
                "-n",
                "team-a",
            ],
            true,
        ),
        ("editor-token", &["create", "roles", "-n", "team-a"], false),
        (
            "editor-token",
            &["update", "pods", "--subresource=status", "-n", "team-a"],
            false,
        ),
        (
            "nsadmin-token",
            &["create", "rolebindings", "-n", "team-a"],
            true,
        ),
        (
            "nsadmin-token",
            &["create", "localsubjectaccessreviews", "-n", "team-a"],
            true,
        ),
        ("nsadmin-token", &["delete", "namespaces/team-a"], false),
        (
            "nsadmin-token",
            &["delete", "configmaps", "-n", "team-b"],
            false,
        ),
        (
            "nobody-token",
            &["list", "configmaps", "-n", "team-a"],
            false,
        ),
        (
            "nobody-token",
            &["create", "selfsubjectaccessreviews"],
            true,
        ),
        ("nobody-token", &["get", "/version"], true),
        ("nobody-token", &["get", "/metrics"], false),
    ];
    let mut wrong = Vec::new();
    for (token, args, expected) in table {
        if can_i(&env, token, args) != *expected {
            wrong.push(format!("{token} can-i {args:?}: expected {expected}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "can-i disagrees with the bootstrap roles:\n{}",
        wrong.join("\n")
    );

    // The real requests agree.
    let list = as_user(
        &env,
        "viewer-token",
        &["get", "configmaps", "-n", "team-a", "-o", "name"],
    );
    assert_eq!(list.stdout.trim(), "configmap/seed", "{}", list.describe());
    assert_eq!(
        forbidden(&as_user(
            &env,
            "viewer-token",
            &["create", "configmap", "x", "-n", "team-a"]
        )),
        r#"error: failed to create configmap: configmaps is forbidden: User "viewer" cannot create resource "configmaps" in API group "" in the namespace "team-a""#
    );
    assert_eq!(
        forbidden(&as_user(
            &env,
            "viewer-token",
            &["get", "configmaps", "-n", "team-b"]
        )),
        r#"Error from server (Forbidden): configmaps is forbidden: User "viewer" cannot list resource "configmaps" in API group "" in the namespace "team-b""#
    );
    // A watch is authorized as a watch.
    let nobody = common::Api::with_token(&env.server, Some("nobody-token".into())).expect("client");
    let watch = nobody
        .get("/api/v1/namespaces/team-a/configmaps?watch=true")
        .expect("watch");
    assert_eq!(
        watch.expect_status(403, "Forbidden")["message"],
        r#"configmaps is forbidden: User "nobody" cannot watch resource "configmaps" in API group "" in the namespace "team-a""#
    );
    let created = as_user(
        &env,
        "editor-token",
        &["create", "configmap", "by-editor", "-n", "team-a"],
    );
    assert_eq!(created.code, Some(0), "{}", created.describe());
    assert_eq!(
        forbidden(&as_user(
            &env,
            "nsadmin-token",
            &["delete", "namespace", "team-a"]
        )),
        r#"Error from server (Forbidden): namespaces "team-a" is forbidden: User "nsadmin" cannot delete resource "namespaces" in API group "" in the namespace "team-a""#
    );
    // Nothing the refusals touched changed.
    assert_eq!(env.api().configmap_names("team-a"), ["by-editor", "seed"]);
    let namespace = env.get_json(&["namespace", "team-a"]);
    assert!(
        namespace["metadata"]["deletionTimestamp"].is_null(),
        "{namespace}"
    );
}

#[test]
fn can_i_list_shows_what_a_service_account_may_do_as_a_real_cluster() {
    let env = start();
    env.ok(&["create", "namespace", "t"]);
    // The admin impersonates (system:masters may impersonate anyone).
    let listed = env.ok(&[
        "auth",
        "can-i",
        "--list",
        "--as=system:serviceaccount:t:x",
        "-n",
        "t",
    ]);
    for expected in [
        "selfsubjectreviews.authentication.k8s.io",
        "selfsubjectaccessreviews.authorization.k8s.io",
        "selfsubjectrulesreviews.authorization.k8s.io",
        "[/api/*]",
        "[/version]",
    ] {
        assert!(listed.contains(expected), "missing {expected}:\n{listed}");
    }
    assert!(!listed.contains("configmaps"), "{listed}");
    // A RoleBinding to the service account (no namespace on the subject: the binding's).
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "x-view", "namespace": "t"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "x"}]}"#,
    );
    let listed = eventually(Duration::from_secs(10), || {
        let listed = env.ok(&[
            "auth",
            "can-i",
            "--list",
            "--as=system:serviceaccount:t:x",
            "-n",
            "t",
        ]);
        listed.contains("configmaps").then_some(listed)
    })
    .unwrap_or_else(|| panic!("the binding never showed{}", env.log()));
    assert!(listed.contains("[get list watch]"), "{listed}");
    // The same account sees nothing of the kind in another namespace.
    let other = env.ok(&[
        "auth",
        "can-i",
        "--list",
        "--as=system:serviceaccount:t:x",
        "-n",
        "default",
    ]);
    assert!(!other.contains("configmaps"), "{other}");
    // The admin's own list starts with everything.
    let admin = env.ok(&["auth", "can-i", "--list"]);
    assert!(
        admin
            .lines()
            .any(|l| l.starts_with("*.*") && l.contains("[*]")),
        "{admin}"
    );
}

#[test]
fn aggregation_fills_view_edit_and_admin_from_labelled_roles() {
    let env = start();
    setup_team_a(&env);
    assert!(!can_i(
        &env,
        "viewer-token",
        &["list", "leases.coordination.k8s.io", "-n", "team-a"]
    ));
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "leases-reader", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
            "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list", "watch"]}]}"#,
    );
    wait_until_allowed(
        &env,
        "viewer-token",
        &["list", "leases.coordination.k8s.io", "-n", "team-a"],
    );
    // view is aggregated into edit and admin too.
    let admin = env.get_json(&["clusterrole", "admin"]);
    let rules = admin["rules"].as_array().expect("admin has rules").clone();
    assert!(
        rules
            .iter()
            .any(|r| r["resources"] == serde_json::json!(["leases"])
                && r["verbs"] == serde_json::json!(["get", "list", "watch"])),
        "{admin}"
    );
    // Removing the label takes the rule away again.
    env.ok(&[
        "label",
        "clusterrole",
        "leases-reader",
        "rbac.authorization.k8s.io/aggregate-to-view-",
    ]);
    eventually(Duration::from_secs(10), || {
        (!can_i(
            &env,
            "viewer-token",
            &["list", "leases.coordination.k8s.io", "-n", "team-a"],
        ))
        .then_some(())
    })
    .unwrap_or_else(|| panic!("the aggregated rule never went away{}", env.log()));
}

#[test]
fn escalation_is_refused_unless_held_or_granted_escalate_and_bind() {
    let env = start();
    setup_team_a(&env);
    let role = |name: &str, rules: &str| {
        format!(
            r#"{{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {{"name": "{name}", "namespace": "team-a"}}, "rules": {rules}}}"#
        )
    };
    // What the namespace admin holds, it may grant.
    let held = role(
        "cm-reader",
        r#"[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]"#,
    );
    let run = env.run_with_stdin(&["apply", "-f", "-", "--token", "nsadmin-token"], &held);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // More than it holds: refused with upstream's message, listing what is missing.
    let more = role(
        "too-much",
        r#"[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["nodes", "pods/status"], "verbs": ["get", "update"]}]"#,
    );
    let run = env.run_with_stdin(&["create", "-f", "-", "--token", "nsadmin-token"], &more);
    assert_eq!(
        forbidden(&run),
        "Error from server (Forbidden): error when creating \"STDIN\": roles.rbac.authorization.k8s.io \"too-much\" is forbidden: \
         user \"nsadmin\" (groups=[\"team-a-admins\" \"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:\n\
         {APIGroups:[\"\"], Resources:[\"nodes\"], Verbs:[\"get\" \"update\"]}\n\
         {APIGroups:[\"\"], Resources:[\"pods/status\"], Verbs:[\"update\"]}"
    );
    // Binding a role it does not hold.
    let run = as_user(
        &env,
        "nsadmin-token",
        &[
            "create",
            "rolebinding",
            "grab",
            "-n",
            "team-a",
            "--clusterrole=cluster-admin",
            "--user=nsadmin",
        ],
    );
    let message = forbidden(&run);
    assert!(
        message.contains(
            r#"rolebindings.rbac.authorization.k8s.io "grab" is forbidden: user "nsadmin""#
        ) && message.contains(r#"{APIGroups:["*"], Resources:["*"], Verbs:["*"]}"#),
        "{message}"
    );
    // Binding one it holds is fine.
    let run = as_user(
        &env,
        "nsadmin-token",
        &[
            "create",
            "rolebinding",
            "share",
            "-n",
            "team-a",
            "--clusterrole=view",
            "--user=nobody",
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // `escalate` and `bind`, granted by a cluster admin, lift the checks.
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "rbac-manager", "namespace": "team-a"},
            "rules": [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["escalate"]},
                      {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"], "resourceNames": ["cluster-admin"]}]}"#,
    );
    env.ok(&[
        "create",
        "rolebinding",
        "nsadmin-rbac",
        "-n",
        "team-a",
        "--role=rbac-manager",
        "--user=nsadmin",
    ]);
    wait_until_allowed(
        &env,
        "nsadmin-token",
        &["escalate", "roles", "-n", "team-a"],
    );
    let run = env.run_with_stdin(&["create", "-f", "-", "--token", "nsadmin-token"], &more);
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let run = as_user(
        &env,
        "nsadmin-token",
        &[
            "create",
            "rolebinding",
            "grab",
            "-n",
            "team-a",
            "--clusterrole=cluster-admin",
            "--user=nobody",
        ],
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let names = env.ok(&["get", "roles,rolebindings", "-n", "team-a", "-o", "name"]);
    for name in [
        "role.rbac.authorization.k8s.io/too-much",
        "rolebinding.rbac.authorization.k8s.io/grab",
    ] {
        assert!(names.contains(name), "{names}");
    }
}

#[test]
fn impersonation_needs_the_impersonate_verb_for_the_user_and_each_group() {
    let env = start();
    setup_team_a(&env);
    let run = as_user(
        &env,
        "imp-token",
        &["get", "configmaps", "-n", "team-a", "--as", "viewer"],
    );
    assert_eq!(
        forbidden(&run),
        r#"Error from server (Forbidden): users "viewer" is forbidden: User "imp" cannot impersonate resource "users" in API group "" at the cluster scope"#
    );
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "impersonate-viewer"},
            "rules": [{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["viewer"]},
                      {"apiGroups": [""], "resources": ["groups"], "verbs": ["impersonate"], "resourceNames": ["readers"]}]}"#,
    );
    env.ok(&[
        "create",
        "clusterrolebinding",
        "imp",
        "--clusterrole=impersonate-viewer",
        "--user=imp",
    ]);
    wait_until_allowed(&env, "imp-token", &["impersonate", "users/viewer"]);
    // As viewer with the readers group, imp sees what viewer sees: the binding is to the group.
    let run = as_user(
        &env,
        "imp-token",
        &[
            "get",
            "configmaps",
            "-n",
            "team-a",
            "-o",
            "name",
            "--as",
            "viewer",
            "--as-group",
            "readers",
        ],
    );
    assert_eq!(run.stdout.trim(), "configmap/seed", "{}", run.describe());
    let whoami: Value = serde_json::from_str(
        &as_user(
            &env,
            "imp-token",
            &[
                "auth",
                "whoami",
                "-o",
                "json",
                "--as",
                "viewer",
                "--as-group",
                "readers",
            ],
        )
        .stdout,
    )
    .expect("whoami prints JSON");
    assert_eq!(
        whoami["status"]["userInfo"],
        serde_json::json!({"username": "viewer", "groups": ["readers", "system:authenticated"]})
    );
    // Without the group, the impersonated viewer has no grant in team-a.
    let run = as_user(
        &env,
        "imp-token",
        &["get", "configmaps", "-n", "team-a", "--as", "viewer"],
    );
    assert!(
        forbidden(&run).contains(r#"User "viewer" cannot list resource "configmaps""#),
        "{}",
        run.describe()
    );
    // Another user or group is refused.
    let run = as_user(
        &env,
        "imp-token",
        &["get", "configmaps", "-n", "team-a", "--as", "editor"],
    );
    assert!(
        forbidden(&run).contains(r#"users "editor" is forbidden"#),
        "{}",
        run.describe()
    );
    let run = as_user(
        &env,
        "imp-token",
        &[
            "get",
            "configmaps",
            "-n",
            "team-a",
            "--as",
            "viewer",
            "--as-group",
            "system:masters",
        ],
    );
    assert!(
        forbidden(&run).contains(r#"groups "system:masters" is forbidden"#),
        "{}",
        run.describe()
    );
}

#[test]
fn o5_block_owner_deletion_needs_update_on_the_owners_finalizers() {
    let env = start();
    setup_team_a(&env);
    let owner = env.get_json(&["configmap", "seed", "-n", "team-a"]);
    let uid = owner["metadata"]["uid"].as_str().expect("uid");
    let child = |name: &str, block: bool| {
        format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "{name}", "namespace": "team-a",
                "ownerReferences": [{{"apiVersion": "v1", "kind": "ConfigMap", "name": "seed", "uid": "{uid}", "blockOwnerDeletion": {block}}}]}}}}"#
        )
    };
    // An editor may set an owner, but not one that blocks the owner's deletion.
    let run = env.run_with_stdin(
        &["create", "-f", "-", "--token", "editor-token"],
        &child("plain", false),
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    let run = env.run_with_stdin(
        &["create", "-f", "-", "--token", "editor-token"],
        &child("blocking", true),
    );
    assert_eq!(
        forbidden(&run),
        "Error from server (Forbidden): error when creating \"STDIN\": configmaps \"blocking\" is forbidden: \
         cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>"
    );
    env.ok_with_stdin(
        &["apply", "-f", "-"],
        r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "cm-finalizers", "namespace": "team-a"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps/finalizers"], "verbs": ["update"]}]}"#,
    );
    env.ok(&[
        "create",
        "rolebinding",
        "editor-finalizers",
        "-n",
        "team-a",
        "--role=cm-finalizers",
        "--user=editor",
    ]);
    wait_until_allowed(
        &env,
        "editor-token",
        &["update", "configmaps/finalizers", "-n", "team-a"],
    );
    let run = env.run_with_stdin(
        &["create", "-f", "-", "--token", "editor-token"],
        &child("blocking", true),
    );
    assert_eq!(run.code, Some(0), "{}", run.describe());
    // Changing the owners of an existing object needs delete on it: a viewer cannot.
    let run = as_user(
        &env,
        "viewer-token",
        &[
            "patch",
            "configmap",
            "plain",
            "-n",
            "team-a",
            "--type=merge",
            "-p",
            r#"{"metadata":{"ownerReferences":null}}"#,
        ],
    );
    assert!(
        forbidden(&run).contains(r#"User "viewer" cannot patch resource "configmaps""#),
        "{}",
        run.describe()
    );
}

#[test]
fn kube_rs_gets_the_forbidden_status_and_access_reviews_answer() {
    let env = start();
    setup_team_a(&env);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let mut config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&env.server.kubeconfig).expect("kubeconfig"),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("config");
        config.auth_info.token = Some("viewer-token".to_string().into());
        let client = kube::Client::try_from(config).expect("client");
        let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client.clone(), "team-b");
        match configmaps.list(&Default::default()).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
                assert_eq!(
                    status.message,
                    r#"configmaps is forbidden: User "viewer" cannot list resource "configmaps" in API group "" in the namespace "team-b""#
                );
            }
            other => panic!("expected a 403, got {other:?}"),
        }
        // A SelfSubjectAccessReview through kube-rs, as the viewer.
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let reviews: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client);
        let ask = |verb: &str| SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some("team-a".into()),
                    verb: Some(verb.into()),
                    resource: Some("configmaps".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let yes = reviews.create(&Default::default(), &ask("list")).await.expect("review");
        let status = yes.status.expect("status");
        assert!(status.allowed);
        assert_eq!(
            status.reason.as_deref(),
            Some(r#"RBAC: allowed by RoleBinding "readers-view/team-a" of ClusterRole "view" to Group "readers""#)
        );
        let no = reviews.create(&Default::default(), &ask("delete")).await.expect("review");
        assert!(!no.status.expect("status").allowed);
    });
    // A SubjectAccessReview names any subject; it needs the right to create one.
    let review = serde_json::json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": "editor", "resourceAttributes": {"namespace": "team-a", "verb": "create", "resource": "secrets"}}
    });
    let answer = env
        .api()
        .post_json(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &review,
        )
        .expect("post");
    assert_eq!(answer.status, 201, "{}", answer.body);
    assert_eq!(answer.json()["status"]["allowed"], true, "{}", answer.body);
    let bad = serde_json::json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}});
    let answer = env
        .api()
        .post_json("/apis/authorization.k8s.io/v1/subjectaccessreviews", &bad)
        .expect("post");
    let status = answer.expect_status(422, "Invalid");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("at least one of user or group must be specified"),
        "{status}"
    );
    let viewer = common::Api::with_token(&env.server, Some("viewer-token".into())).expect("client");
    let answer = viewer
        .post_json(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &review,
        )
        .expect("post");
    answer.expect_status(403, "Forbidden");
}
