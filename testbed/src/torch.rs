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
    let ok = Command::new(&python)
        .args(["-c", "import torch, sklearn"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(python)
    } else {
        Err(format!(
            "{} cannot import torch and sklearn",
            python.display()
        ))
    }
}

/// `python -m torch.distributed.run --standalone --nproc-per-node N script
/// args...` with the package and its library found in this checkout.
pub fn torchrun(python: &Path, repo: &Path, ranks: usize, script: &str) -> Command {
    let mut c = Command::new(python);
    c.env("PYTHONPATH", repo.join("capi/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("OMP_NUM_THREADS", "1")
        .args(["-m", "torch.distributed.run", "--standalone"])
        .arg(format!("--nproc-per-node={ranks}"))
        .arg(repo.join(script));
    c
}
