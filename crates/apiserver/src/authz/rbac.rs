//! The RBAC authorizer's view of the cluster: every Role, ClusterRole, RoleBinding and
//! ClusterRoleBinding, indexed for the questions asked on each request, and the evaluation
//! of upstream's `RBACAuthorizer` on it.
//!
//! Rules are visited as upstream visits them: ClusterRoleBindings first, then the
//! RoleBindings of the request's namespace. The first rule that allows the request decides;
//! a binding whose role does not exist contributes an error to the reason instead of rules.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::Attributes;
use super::rules::{PolicyRule, parse_rules};
use crate::authn::Identity;
use crate::object;

pub use crate::authn::service_account::SERVICE_ACCOUNT_USER_PREFIX as SERVICE_ACCOUNT_PREFIX;

#[derive(Clone, Debug, PartialEq, Eq)]
enum RoleKind {
    Role,
    ClusterRole,
}

impl RoleKind {
    fn as_str(&self) -> &'static str {
        match self {
            RoleKind::Role => "Role",
            RoleKind::ClusterRole => "ClusterRole",
        }
    }
}

#[derive(Clone, Debug)]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

impl Subject {
    /// Upstream's `appliesToUser`. A ServiceAccount subject without a namespace means the
    /// binding's own namespace.
    fn applies_to(&self, user: &Identity, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.user == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => self.account(binding_namespace).is_some_and(|account| {
                user.user
                    .strip_prefix(SERVICE_ACCOUNT_PREFIX)
                    .and_then(|rest| rest.split_once(':'))
                    == Some(account)
            }),
            _ => false,
        }
    }

    /// The `(namespace, name)` a ServiceAccount subject names: its own namespace, else the
    /// binding's; `None` when neither is set (such a subject applies to no one).
    fn account<'a>(&'a self, binding_namespace: &'a str) -> Option<(&'a str, &'a str)> {
        let namespace = if self.namespace.is_empty() {
            binding_namespace
        } else {
            &self.namespace
        };
        (!namespace.is_empty()).then_some((namespace, self.name.as_str()))
    }

    /// Upstream's `describeSubject`.
    fn describe(&self, binding_namespace: &str) -> String {
        if self.kind == "ServiceAccount" {
            let namespace = if self.namespace.is_empty() {
                binding_namespace
            } else {
                &self.namespace
            };
            format!("{} {:?}", self.kind, format!("{}/{namespace}", self.name))
        } else {
            format!("{} {:?}", self.kind, self.name)
        }
    }
}

#[derive(Clone, Debug)]
struct Binding {
    name: String,
    /// Empty for a ClusterRoleBinding.
    namespace: String,
    role_kind: RoleKind,
    role_name: String,
    subjects: Vec<Subject>,
}

impl Binding {
    fn parse(object: &Value) -> Binding {
        let text = |v: &Value, key: &str| {
            v.get(key)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let role_ref = object.get("roleRef").cloned().unwrap_or_default();
        Binding {
            name: object::name(object).to_string(),
            namespace: object::namespace(object).unwrap_or_default().to_string(),
            role_kind: if text(&role_ref, "kind") == "Role" {
                RoleKind::Role
            } else {
                RoleKind::ClusterRole
            },
            role_name: text(&role_ref, "name"),
            subjects: object
                .get("subjects")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|s| Subject {
                    kind: text(s, "kind"),
                    name: text(s, "name"),
                    namespace: text(s, "namespace"),
                })
                .collect(),
        }
    }

    /// Upstream's binding describers, as `SubjectAccessReview` reasons print them.
    fn describe(&self, subject: &Subject) -> String {
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding {:?} of {} {:?} to {}",
                self.name,
                self.role_kind.as_str(),
                self.role_name,
                subject.describe("")
            )
        } else {
            format!(
                "RoleBinding {:?} of {} {:?} to {}",
                format!("{}/{}", self.name, self.namespace),
                self.role_kind.as_str(),
                self.role_name,
                subject.describe(&self.namespace)
            )
        }
    }
}

/// Bindings by the subjects they name, so a request visits only the bindings that can apply
/// to its user rather than every binding in the cluster (a cluster with hundreds of bindings
/// paid for each of them on every request). Subjects of other kinds never apply and are not
/// indexed.
#[derive(Debug, Default)]
struct SubjectIndex {
    users: HashMap<String, BTreeSet<String>>,
    groups: HashMap<String, BTreeSet<String>>,
    /// Namespace → account name → bindings.
    service_accounts: HashMap<String, HashMap<String, BTreeSet<String>>>,
}

impl SubjectIndex {
    fn add(&mut self, binding: &Binding) {
        for subject in &binding.subjects {
            let names = match subject.kind.as_str() {
                "User" => self.users.entry(subject.name.clone()).or_default(),
                "Group" => self.groups.entry(subject.name.clone()).or_default(),
                "ServiceAccount" => match subject.account(&binding.namespace) {
                    Some((namespace, name)) => self
                        .service_accounts
                        .entry(namespace.to_string())
                        .or_default()
                        .entry(name.to_string())
                        .or_default(),
                    None => continue,
                },
                _ => continue,
            };
            names.insert(binding.name.clone());
        }
    }

    /// Unfiles `binding` under each of its subjects, dropping the entries it leaves empty.
    fn remove(&mut self, binding: &Binding) {
        fn unfile(map: &mut HashMap<String, BTreeSet<String>>, key: &str, binding: &str) {
            if let Some(names) = map.get_mut(key) {
                names.remove(binding);
                if names.is_empty() {
                    map.remove(key);
                }
            }
        }
        for subject in &binding.subjects {
            match subject.kind.as_str() {
                "User" => unfile(&mut self.users, &subject.name, &binding.name),
                "Group" => unfile(&mut self.groups, &subject.name, &binding.name),
                "ServiceAccount" => {
                    let Some((namespace, name)) = subject.account(&binding.namespace) else {
                        continue;
                    };
                    if let Some(accounts) = self.service_accounts.get_mut(namespace) {
                        unfile(accounts, name, &binding.name);
                        if accounts.is_empty() {
                            self.service_accounts.remove(namespace);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// The names of the bindings that name `user`, one of its groups or its ServiceAccount,
    /// in name order.
    fn candidates<'a>(&'a self, user: &Identity) -> Vec<&'a str> {
        let mut names: Vec<&str> = Vec::new();
        let mut take = |found: Option<&'a BTreeSet<String>>| {
            names.extend(found.into_iter().flatten().map(String::as_str));
        };
        take(self.users.get(&user.user));
        for group in &user.groups {
            take(self.groups.get(group));
        }
        if let Some((namespace, name)) = user
            .user
            .strip_prefix(SERVICE_ACCOUNT_PREFIX)
            .and_then(|rest| rest.split_once(':'))
        {
            take(
                self.service_accounts
                    .get(namespace)
                    .and_then(|accounts| accounts.get(name)),
            );
        }
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// Bindings of one scope (the cluster, or one namespace) by name, with their subject index.
#[derive(Debug, Default)]
struct Bindings {
    /// By name: visited in name order, so the binding named in a reason does not vary.
    by_name: BTreeMap<String, Binding>,
    by_subject: SubjectIndex,
}

impl Bindings {
    fn put(&mut self, binding: Binding) {
        if let Some(old) = self.by_name.remove(&binding.name) {
            self.by_subject.remove(&old);
        }
        self.by_subject.add(&binding);
        self.by_name.insert(binding.name.clone(), binding);
    }

    fn remove(&mut self, name: &str) {
        if let Some(old) = self.by_name.remove(name) {
            self.by_subject.remove(&old);
        }
    }

    /// The bindings that may apply to `user`, in name order.
    fn for_user<'a>(&'a self, user: &Identity) -> impl Iterator<Item = &'a Binding> + 'a {
        self.by_subject
            .candidates(user)
            .into_iter()
            .filter_map(|name| self.by_name.get(name))
    }
}

/// Every RBAC object, indexed. Built from watch events by [`super::Authorizer`].
#[derive(Debug, Default)]
pub struct RbacIndex {
    cluster_roles: HashMap<String, Arc<Vec<PolicyRule>>>,
    roles: HashMap<(String, String), Arc<Vec<PolicyRule>>>,
    cluster_role_bindings: Bindings,
    /// By namespace.
    role_bindings: HashMap<String, Bindings>,
}

/// Which of the four RBAC kinds an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RbacKind {
    Role,
    ClusterRole,
    RoleBinding,
    ClusterRoleBinding,
}

impl RbacKind {
    pub const ALL: [RbacKind; 4] = [
        RbacKind::ClusterRole,
        RbacKind::Role,
        RbacKind::ClusterRoleBinding,
        RbacKind::RoleBinding,
    ];

    pub fn plural(self) -> &'static str {
        match self {
            RbacKind::Role => "roles",
            RbacKind::ClusterRole => "clusterroles",
            RbacKind::RoleBinding => "rolebindings",
            RbacKind::ClusterRoleBinding => "clusterrolebindings",
        }
    }

    pub fn from_plural(plural: &str) -> Option<RbacKind> {
        RbacKind::ALL.into_iter().find(|k| k.plural() == plural)
    }
}

/// How a request was decided, and why (`SubjectAccessReview`'s `status.reason`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: String,
}

impl RbacIndex {
    /// Adds or replaces one object.
    pub fn put(&mut self, kind: RbacKind, object: &Value) {
        let name = object::name(object).to_string();
        let namespace = object::namespace(object).unwrap_or_default().to_string();
        match kind {
            RbacKind::ClusterRole | RbacKind::Role => {
                let rules = parse_rules(object).unwrap_or_else(|error| {
                    // The registry validates rules on write; a stored role that still does
                    // not parse grants nothing rather than something unintended.
                    tracing::warn!(role = %name, %error, "ignoring the rules of a role that do not parse");
                    Vec::new()
                });
                if kind == RbacKind::ClusterRole {
                    self.cluster_roles.insert(name, Arc::new(rules));
                } else {
                    self.roles.insert((namespace, name), Arc::new(rules));
                }
            }
            RbacKind::ClusterRoleBinding => {
                self.cluster_role_bindings.put(Binding::parse(object));
            }
            RbacKind::RoleBinding => {
                self.role_bindings
                    .entry(namespace)
                    .or_default()
                    .put(Binding::parse(object));
            }
        }
    }

    /// Removes one object.
    pub fn remove(&mut self, kind: RbacKind, object: &Value) {
        let name = object::name(object).to_string();
        let namespace = object::namespace(object).unwrap_or_default().to_string();
        match kind {
            RbacKind::ClusterRole => {
                self.cluster_roles.remove(&name);
            }
            RbacKind::Role => {
                self.roles.remove(&(namespace, name));
            }
            RbacKind::ClusterRoleBinding => {
                self.cluster_role_bindings.remove(&name);
            }
            RbacKind::RoleBinding => {
                if let Some(bindings) = self.role_bindings.get_mut(&namespace) {
                    bindings.remove(&name);
                    if bindings.by_name.is_empty() {
                        self.role_bindings.remove(&namespace);
                    }
                }
            }
        }
    }

    /// Forgets every object of `kind` (before a re-list replaces them).
    pub fn clear(&mut self, kind: RbacKind) {
        match kind {
            RbacKind::ClusterRole => self.cluster_roles.clear(),
            RbacKind::Role => self.roles.clear(),
            RbacKind::ClusterRoleBinding => self.cluster_role_bindings = Bindings::default(),
            RbacKind::RoleBinding => self.role_bindings.clear(),
        }
    }

    /// The rules a binding's role grants, or the error upstream reports for a missing role.
    fn role_rules(&self, binding: &Binding) -> Result<Arc<Vec<PolicyRule>>, String> {
        let found = match binding.role_kind {
            RoleKind::ClusterRole => self.cluster_roles.get(&binding.role_name),
            RoleKind::Role => self
                .roles
                .get(&(binding.namespace.clone(), binding.role_name.clone())),
        };
        found.cloned().ok_or_else(|| match binding.role_kind {
            RoleKind::ClusterRole => format!(
                "clusterrole.rbac.authorization.k8s.io {:?} not found",
                binding.role_name
            ),
            RoleKind::Role => format!(
                "role.rbac.authorization.k8s.io {:?} not found",
                binding.role_name
            ),
        })
    }

    /// Visits every rule that applies to `user` in `namespace` (cluster-wide rules alone for
    /// an empty namespace), with the binding and subject that grant it, until `visit`
    /// returns true. Returns the errors met on the way (bindings of missing roles).
    fn visit(
        &self,
        user: &Identity,
        namespace: &str,
        mut visit: impl FnMut(&Binding, &Subject, &PolicyRule) -> bool,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        let namespaced = (!namespace.is_empty())
            .then(|| self.role_bindings.get(namespace))
            .flatten();
        let bindings = self
            .cluster_role_bindings
            .for_user(user)
            .chain(namespaced.into_iter().flat_map(|b| b.for_user(user)));
        for binding in bindings {
            let Some(subject) = binding
                .subjects
                .iter()
                .find(|s| s.applies_to(user, &binding.namespace))
            else {
                continue;
            };
            match self.role_rules(binding) {
                Ok(rules) => {
                    for rule in rules.iter() {
                        if visit(binding, subject, rule) {
                            return errors;
                        }
                    }
                }
                Err(error) => errors.push(error),
            }
        }
        errors
    }

    /// Upstream's `RBACAuthorizer.Authorize`.
    pub fn authorize(&self, request: &Attributes) -> Decision {
        let mut allowed_by = None;
        let errors = self.visit(
            &request.user,
            &request.namespace,
            |binding, subject, rule| {
                if rule.allows(request) {
                    allowed_by = Some(binding.describe(subject));
                    true
                } else {
                    false
                }
            },
        );
        match allowed_by {
            Some(by) => Decision {
                allowed: true,
                reason: format!("RBAC: allowed by {by}"),
            },
            None => Decision {
                allowed: false,
                reason: match errors.as_slice() {
                    [] => String::new(),
                    [one] => format!("RBAC: {one}"),
                    many => format!("RBAC: [{}]", many.join(", ")),
                },
            },
        }
    }

    /// Every rule that applies to `user` in `namespace` (upstream's `RulesFor`), and the
    /// errors met (which make a rules review `incomplete`).
    pub fn rules_for(&self, user: &Identity, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = Vec::new();
        let errors = self.visit(user, namespace, |_, _, rule| {
            rules.push(rule.clone());
            false
        });
        (rules, errors)
    }

    /// The rules of a ClusterRole, if it exists.
    pub fn cluster_role(&self, name: &str) -> Option<Arc<Vec<PolicyRule>>> {
        self.cluster_roles.get(name).cloned()
    }

    /// The rules of a Role, if it exists.
    pub fn role(&self, namespace: &str, name: &str) -> Option<Arc<Vec<PolicyRule>>> {
        self.roles
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn user(name: &str, groups: &[&str]) -> Identity {
        Identity {
            user: name.into(),
            uid: String::new(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            extra: Default::default(),
        }
    }

    fn index() -> RbacIndex {
        let mut index = RbacIndex::default();
        index.put(
            RbacKind::ClusterRole,
            &json!({"metadata": {"name": "reader"}, "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]}]}),
        );
        index.put(
            RbacKind::Role,
            &json!({"metadata": {"name": "writer", "namespace": "a"}, "rules": [{"verbs": ["create"], "apiGroups": [""], "resources": ["configmaps"]}]}),
        );
        index.put(
            RbacKind::ClusterRoleBinding,
            &json!({"metadata": {"name": "readers"}, "roleRef": {"kind": "ClusterRole", "name": "reader"}, "subjects": [{"kind": "Group", "name": "team"}]}),
        );
        index.put(
            RbacKind::RoleBinding,
            &json!({"metadata": {"name": "writers", "namespace": "a"}, "roleRef": {"kind": "Role", "name": "writer"}, "subjects": [{"kind": "ServiceAccount", "name": "bot"}]}),
        );
        index.put(
            RbacKind::RoleBinding,
            &json!({"metadata": {"name": "dangling", "namespace": "a"}, "roleRef": {"kind": "ClusterRole", "name": "gone"}, "subjects": [{"kind": "User", "name": "eve"}]}),
        );
        index
    }

    fn ask(index: &RbacIndex, who: Identity, verb: &str, namespace: &str) -> Decision {
        index.authorize(&Attributes::resource(
            who,
            verb,
            "",
            "configmaps",
            "",
            namespace,
            "",
        ))
    }

    #[test]
    fn bindings_grant_their_roles_rules_to_their_subjects() {
        let index = index();
        let member = user("ann", &["team"]);
        let decision = ask(&index, member.clone(), "list", "b");
        assert!(decision.allowed);
        assert_eq!(
            decision.reason,
            r#"RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "reader" to Group "team""#
        );
        assert!(!ask(&index, member, "create", "a").allowed);
        let bot = user("system:serviceaccount:a:bot", &[]);
        let decision = ask(&index, bot.clone(), "create", "a");
        assert_eq!(
            decision.reason,
            r#"RBAC: allowed by RoleBinding "writers/a" of Role "writer" to ServiceAccount "bot/a""#
        );
        assert!(
            !ask(&index, bot, "create", "b").allowed,
            "a RoleBinding grants only in its namespace"
        );
    }

    #[test]
    fn a_missing_role_is_reported_in_the_reason() {
        let decision = ask(&index(), user("eve", &[]), "get", "a");
        assert_eq!(
            decision,
            Decision {
                allowed: false,
                reason: r#"RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found"#.into()
            }
        );
        assert_eq!(ask(&index(), user("nobody", &[]), "get", "a").reason, "");
    }

    #[test]
    fn a_replaced_binding_applies_only_to_its_new_subjects() {
        let mut index = index();
        index.put(
            RbacKind::ClusterRoleBinding,
            &json!({"metadata": {"name": "readers"}, "roleRef": {"kind": "ClusterRole", "name": "reader"}, "subjects": [{"kind": "User", "name": "bob"}, {"kind": "ServiceAccount", "name": "robot", "namespace": "c"}]}),
        );
        assert!(!ask(&index, user("ann", &["team"]), "list", "b").allowed);
        assert!(ask(&index, user("bob", &[]), "list", "b").allowed);
        let robot = ask(
            &index,
            user("system:serviceaccount:c:robot", &[]),
            "get",
            "b",
        );
        assert_eq!(
            robot.reason,
            r#"RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "reader" to ServiceAccount "robot/c""#
        );
        // A ServiceAccount subject without a namespace names none in a ClusterRoleBinding.
        index.put(
            RbacKind::ClusterRoleBinding,
            &json!({"metadata": {"name": "readers"}, "roleRef": {"kind": "ClusterRole", "name": "reader"}, "subjects": [{"kind": "ServiceAccount", "name": "robot"}]}),
        );
        assert!(
            !ask(
                &index,
                user("system:serviceaccount:c:robot", &[]),
                "get",
                "b"
            )
            .allowed
        );
        assert!(!ask(&index, user("bob", &[]), "list", "b").allowed);
        // Of several bindings that apply, the first by name is the one a reason names.
        for name in ["z-team", "a-team"] {
            index.put(
                RbacKind::ClusterRoleBinding,
                &json!({"metadata": {"name": name}, "roleRef": {"kind": "ClusterRole", "name": "reader"}, "subjects": [{"kind": "Group", "name": "team"}, {"kind": "User", "name": "ann"}]}),
            );
        }
        assert_eq!(
            ask(&index, user("ann", &["team"]), "list", "b").reason,
            r#"RBAC: allowed by ClusterRoleBinding "a-team" of ClusterRole "reader" to Group "team""#
        );
    }

    #[test]
    fn removal_takes_the_grant_away() {
        let mut index = index();
        index.remove(
            RbacKind::ClusterRoleBinding,
            &json!({"metadata": {"name": "readers"}}),
        );
        assert!(!ask(&index, user("ann", &["team"]), "list", "b").allowed);
        let (rules, errors) = index.rules_for(&user("system:serviceaccount:a:bot", &[]), "a");
        assert_eq!((rules.len(), errors.len()), (1, 0));
    }
}
