//! The Rust bindings in `src/generated/` are checked in (so that no build runs a protobuf
//! compiler); this test keeps them equal to what the `.proto` files in `proto/` generate.
//!
//! It compiles the protos with protox (pure Rust, no `protoc`) and runs tonic's code generator
//! on the result, exactly as a build script would, into a temporary directory, then compares
//! file by file. After editing a `.proto` (or upgrading prost or tonic), regenerate with
//!
//! ```sh
//! FINALE_ETCD_RPC_REGENERATE=1 cargo test -p finale-etcd-rpc --test bindings
//! ```
//!
//! and commit the result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The protos to compile, relative to `proto/`; imports resolve against `proto/` too.
const PROTOS: &[&str] = &["mvccpb/kv.proto", "etcdserverpb/rpc.proto"];

/// Set to a non-empty value to write the generated files into `src/generated/` instead of
/// comparing.
const REGENERATE: &str = "FINALE_ETCD_RPC_REGENERATE";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs protox and tonic-prost-build into `out_dir`, with the settings the crate relies on:
/// client stubs only (no server traits), and no transport-specific `connect` helpers (the
/// crate's `Client` builds the channel, with its message size limits).
fn generate(out_dir: &Path) -> anyhow::Result<()> {
    let proto_dir = crate_dir().join("proto");
    let files: Vec<PathBuf> = PROTOS.iter().map(|proto| proto_dir.join(proto)).collect();
    let descriptors = protox::compile(&files, [&proto_dir]).context("compile the protos")?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .out_dir(out_dir)
        .compile_fds(descriptors)
        .context("generate Rust code")
}

/// The `.rs` files in `dir`, by file name.
fn rust_files(dir: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "rs") {
            let name = path
                .file_name()
                .and_then(|name| name.to_str())
                .context("non-UTF-8 file name")?
                .to_string();
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("read {}", path.display()))?;
            files.insert(name, text);
        }
    }
    Ok(files)
}

#[test]
fn checked_in_bindings_match_the_protos() -> anyhow::Result<()> {
    let scratch = tempfile::tempdir()?;
    generate(scratch.path())?;
    let fresh = rust_files(scratch.path())?;
    // Precondition: the generator produced one file per proto package.
    assert_eq!(
        fresh.keys().map(String::as_str).collect::<Vec<_>>(),
        ["etcdserverpb.rs", "mvccpb.rs"],
        "unexpected set of generated files"
    );

    let checked_in_dir = crate_dir().join("src/generated");
    if std::env::var_os(REGENERATE).is_some_and(|value| !value.is_empty()) {
        for (name, text) in &fresh {
            let path = checked_in_dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        }
        return Ok(());
    }

    let checked_in = rust_files(&checked_in_dir)?;
    let mut stale = Vec::new();
    for (name, text) in &fresh {
        if checked_in.get(name) != Some(text) {
            stale.push(name.as_str());
        }
    }
    for name in checked_in.keys() {
        if !fresh.contains_key(name) {
            stale.push(name.as_str());
        }
    }
    if !stale.is_empty() {
        bail!(
            "src/generated/{{{}}} differ from what proto/ generates; run \
             `{REGENERATE}=1 cargo test -p finale-etcd-rpc --test bindings` and commit the result",
            stale.join(",")
        );
    }
    Ok(())
}
