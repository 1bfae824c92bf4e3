use super::super::tests::EXAMPLE;
use super::super::*;

#[test]
fn example_policy_parses_with_every_field() {
    let policy = Policy::from_yaml_str(EXAMPLE).expect("valid policy");
    assert_eq!(policy.rules.len(), 8);
    assert_eq!(policy.omit_stages, [Stage::RequestReceived]);
    assert!(!policy.omit_managed_fields);
    assert!(policy.unknown_fields().is_empty());
    let lease = &policy.rules[2];
    assert_eq!(lease.level, Level::None);
    assert_eq!(lease.resources[0].group, "coordination.k8s.io");
    assert_eq!(lease.resources[0].resource_names, ["kube-scheduler"]);
    let probes = &policy.rules[4];
    assert_eq!(probes.user_groups, ["system:unauthenticated"]);
    assert_eq!(probes.non_resource_urls, ["/healthz*", "/version"]);
    assert_eq!(policy.rules[5].namespaces, ["kube-system"]);
    assert_eq!(policy.rules[6].omit_managed_fields, Some(false));
    assert_eq!(policy.rules[7].omit_stages, [Stage::ResponseStarted]);
}

#[test]
fn json_policy_is_accepted() {
    let policy = Policy::from_yaml_str(
        r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy",
            "rules":[{"level":"None","nonResourceURLs":["/readyz"]},{"level":"RequestResponse"}]}"#,
    )
    .expect("valid JSON policy");
    assert_eq!(policy.rules[0].non_resource_urls, ["/readyz"]);
    assert_eq!(policy.rules[1].level, Level::RequestResponse);
}

#[test]
fn unknown_level_names_the_file_line_and_column() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("policy.yaml");
    let text = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: Metadata\n    \
                verbs: [get]\n  - level: None\n  - level: Everything\n";
    std::fs::write(&path, text).expect("write policy");
    let error = Policy::load(&path).expect_err("unknown level");
    let message = error.to_string();
    let expected = format!(
        "--audit-policy-file {}: line 7 column 12: unknown variant `Everything`",
        path.display()
    );
    assert!(message.starts_with(&expected), "{message}");
    assert!(message.contains("RequestResponse"), "{message}");
    assert!(matches!(
        error,
        PolicyError::Parse {
            location: Some((7, 12)),
            ..
        }
    ));
}

#[test]
fn unknown_stage_is_refused_with_its_line() {
    let error = Policy::from_yaml_str(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages:\n  - RequestReceived\n  - Finished\nrules:\n  - level: None\n",
    )
    .expect_err("unknown stage");
    let message = error.to_string();
    assert!(
        message.starts_with("audit policy: line 5 column 5: unknown variant `Finished`"),
        "{message}"
    );
}

#[test]
fn bad_yaml_names_its_line() {
    let error = Policy::from_yaml_str(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - level: [Metadata\n",
    )
    .expect_err("unclosed bracket");
    let PolicyError::Parse {
        location, message, ..
    } = &error
    else {
        panic!("not a parse error: {error}");
    };
    assert_eq!(location.map(|(line, _)| line), Some(4), "{error}");
    assert!(!message.contains('\n'), "one line: {message:?}");
    assert!(error.to_string().contains("line 4 column"), "{error}");
}

#[test]
fn unknown_fields_are_reported_and_ignored_as_upstream() {
    let policy = Policy::from_yaml_str(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nlevel: Metadata\nrules:\n  - level: Request\n    \
         resources:\n      - group: \"\"\n        resource: [pods]\n",
    )
    .expect("upstream falls back to lenient decoding");
    assert_eq!(
        policy.unknown_fields(),
        ["level", "rules[0].resources[0].resource"]
    );
    // The misspelt key is ignored: the rule matches every core resource.
    assert!(policy.rules[0].resources[0].resources.is_empty());
}

#[test]
fn a_rule_without_level_is_refused() {
    let error = Policy::from_yaml_str(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n  - levle: Metadata\n",
    )
    .expect_err("level is required");
    assert_eq!(
        error.to_string(),
        "audit policy: line 4 column 5: missing field `level`"
    );
}

#[test]
fn only_audit_k8s_io_v1_policies_load() {
    for (text, expected) in [
        (
            "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n  - level: None\n",
            "apiVersion: Unsupported value: \"audit.k8s.io/v1beta1\"",
        ),
        (
            "kind: Policy\nrules:\n  - level: None\n",
            "apiVersion: Required value",
        ),
        (
            "apiVersion: audit.k8s.io/v1\nkind: Event\nrules:\n  - level: None\n",
            "kind: Unsupported value: \"Event\"",
        ),
        (
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n",
            "rules: Required value",
        ),
    ] {
        let error = Policy::from_yaml_str(text).expect_err(text);
        assert!(error.to_string().contains(expected), "{text}: {error}");
    }
}

#[test]
fn validation_as_upstream() {
    let text = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
  - level: None
    nonResourceURLs: ["healthz", "/api/*/x"]
  - level: Metadata
    namespaces: [default]
    nonResourceURLs: ["/metrics"]
  - level: Metadata
    resources:
      - group: apps/v1
      - group: ""
        resourceNames: [x]
"#;
    let Err(PolicyError::Invalid { problems, .. }) = Policy::from_yaml_str(text) else {
        panic!("an invalid policy loaded");
    };
    let expected = [
        "rules[0].nonResourceURLs[0]: Invalid value: \"healthz\": non-resource URL rules must begin with a '/'",
        "rules[0].nonResourceURLs[1]: Invalid value: \"/api/*/x\": non-resource URL wildcards '*' must be the final",
        "rules[1].nonResourceURLs: Invalid value: [\"/metrics\"]: rules cannot apply to both",
        "rules[2].resources[0].group: Invalid value: \"apps/v1\": a lowercase RFC 1123 subdomain",
        "rules[2].resources[1].resourceNames: Invalid value: [\"x\"]: using resourceNames requires",
    ];
    assert_eq!(problems.len(), expected.len(), "{problems:#?}");
    for (problem, expected) in problems.iter().zip(expected) {
        assert!(
            problem.starts_with(expected),
            "{problem}\nexpected: {expected}"
        );
    }
}

#[test]
fn a_missing_file_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("absent.yaml");
    let error = Policy::load(&path).expect_err("no such file");
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "--audit-policy-file {}: cannot read it:",
            path.display()
        )),
        "{message}"
    );
}

#[test]
fn null_lists_read_as_empty() {
    let policy = Policy::from_yaml_str("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages:\nrules:\n  - level: None\n    users: ~\n")
        .expect("nulls are empty lists");
    assert!(policy.omit_stages.is_empty());
    assert!(policy.rules[0].users.is_empty());
}
