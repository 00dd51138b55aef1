//! Names the commit the binary is built from (`weir --version`, `weir_build_info`), from git
//! when the source is a checkout, else "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=WEIR_COMMIT={commit}");
    // Built again when HEAD moves: a new commit, or another branch checked out.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
    }
    // Branches live in the common directory (the same as above, but for a worktree).
    if let Some(common) = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]) {
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={common}/{reference}");
        }
        println!("cargo:rerun-if-changed={common}/packed-refs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
