//! With the `train` feature, records libtorch's directory as the binary's rpath so `capflow`
//! finds `libtorch*.so` without LD_LIBRARY_PATH. libtorch comes from `$LIBTORCH`, or from the
//! PyTorch wheel of the `python3` on PATH when `LIBTORCH_USE_PYTORCH=1` (scripts/setup-torch.sh).

use std::path::PathBuf;
use std::process::Command;

fn libtorch_lib_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("LIBTORCH") {
        return Some(PathBuf::from(dir).join("lib"));
    }
    let python = std::env::var("PYTHON_SYS_EXECUTABLE").unwrap_or_else(|_| "python3".into());
    let output = Command::new(python)
        .args([
            "-c",
            "import os, torch; print(os.path.dirname(torch.__file__))",
        ])
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let dir = String::from_utf8(output.stdout).ok()?;
    Some(PathBuf::from(dir.trim()).join("lib"))
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_USE_PYTORCH");
    if std::env::var_os("CARGO_FEATURE_TRAIN").is_none() {
        return;
    }
    match libtorch_lib_dir() {
        Some(dir) => {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
            // libtorch's CUDA backend registers itself when libtorch_cuda is loaded, but no
            // symbol of it is used directly, so `--as-needed` would drop it and CUDA would never
            // be available: keep it (a CPU-only libtorch has no such library).
            if dir.join("libtorch_cuda.so").exists() {
                println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
            }
        }
        None => println!(
            "cargo:warning=libtorch not found: set LIBTORCH or LIBTORCH_USE_PYTORCH=1 with torch installed (scripts/setup-torch.sh)"
        ),
    }
}
