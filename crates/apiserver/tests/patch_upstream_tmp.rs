use finale_apiserver::patch::*;
use serde_json::{Value, json};

struct S;
impl PatchSchema for S {
    fn list_strategy(&self, path: &[&str]) -> ListStrategy {
        match path.last().copied() {
            Some("mergingList" | "mergeItemPtr" | "retainKeysMergingList") => {
                ListStrategy::MergeByKey("name")
            }
            Some("mergingIntList") => ListStrategy::MergePrimitives,
            _ => ListStrategy::Replace,
        }
    }
    fn map_strategy(&self, path: &[&str]) -> MapStrategy {
        if path.last() == Some(&"replacingItem") {
            MapStrategy::Replace
        } else {
            MapStrategy::Merge
        }
    }
}

#[test]
fn upstream() {
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string("/tmp/smpcheck/cases.json").unwrap())
            .unwrap();
    let mut out = vec![];
    for c in cases {
        let r = apply_strategic_merge_patch(&c["original"], &c["patch"], &S);
        out.push(match r {
            Ok(v) => json!({"id": c["id"], "ok": v}),
            Err(e) => json!({"id": c["id"], "err": e.to_string(), "kind": format!("{e:?}").split('(').next().unwrap().to_string()}),
        });
    }
    std::fs::write(
        "/tmp/smpcheck/out.json",
        serde_json::to_string(&out).unwrap(),
    )
    .unwrap();
}

#[test]
fn debug_nested() {
    let orig = json!({"mergingList": [{"name": 1, "mergingList": [{"name": 1}, {"name": 2, "value": 2}]}, {"name": 2}]});
    let patch = json!({"$setElementOrder/mergingList": [{"name": 1}, {"name": 2}], "mergingList": [{"$setElementOrder/mergingList": [{"name": 2}, {"name": 1}], "name": 1, "mergingList": [{"name": 1, "value": 1}]}]});
    println!(
        "{}",
        apply_strategic_merge_patch(&orig, &patch, &S).unwrap()
    );
    let inner_o = json!({"mergingList": [{"name": 1}, {"name": 2, "value": 2}]});
    let inner_p = json!({"$setElementOrder/mergingList": [{"name": 2}, {"name": 1}], "mergingList": [{"name": 1, "value": 1}]});
    println!(
        "{}",
        apply_strategic_merge_patch(&inner_o, &inner_p, &S).unwrap()
    );
}
