//! Finding a Python with torch and running `torchrun` on this checkout's
//! package: shared by `inagg bench --torch` and tests/torch.rs.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python that has torch and scikit-learn: $INAGG_TORCH_PYTHON, else
/// `repo`/target/torch-venv/bin/python (scripts/test makes it), or why
/// there is none.
pub fn torch_python(repo: &Path) -> std::result::Result<PathBuf, String> {
    let python = match std::env::var_os("INAGG_TORCH_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => repo.join("target/torch-venv/bin/python"),
    };
    if !python.exists() {
        return Err(format!(
            "{} not found (set INAGG_TORCH_PYTHON, or run scripts/test, which makes it)",
            python.display()
        ));
    }
    if imports(&python, "torch, sklearn") {
        Ok(python)
    } else {
        Err(format!(
            "{} cannot import torch and sklearn",
            python.display()
        ))
    }
}

/// Whether `python` can `import modules` (a comma-separated list).
pub fn imports(python: &Path, modules: &str) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `python` with this checkout's package on its path, one OpenMP thread
/// per process (the ranks share the machine's cores) and no bytecode
/// written into the checkout.
pub fn python_here(python: &Path, repo: &Path) -> Command {
    let mut c = Command::new(python);
    c.env("PYTHONPATH", repo.join("capi/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("OMP_NUM_THREADS", "1");
    c
}

/// `python -m torch.distributed.run --standalone --nproc-per-node N script
/// args...` with the package and its library found in this checkout.
pub fn torchrun(python: &Path, repo: &Path, ranks: usize, script: &str) -> Command {
    let mut c = python_here(python, repo);
    c.args(["-m", "torch.distributed.run", "--standalone"])
        .arg(format!("--nproc-per-node={ranks}"))
        .arg(repo.join(script));
    c
}
