//! `inagg` processes in tests: a child started with its first line of
//! standard output read (where the emulator says its addresses, an agent
//! its result), and killed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A child process, killed (and reaped) when dropped.
#[derive(Debug)]
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `command` with its standard output piped and returns it with
/// the first line it printed (empty if it printed none before closing it).
///
/// # Panics
/// When the command cannot be started or its output read.
pub fn first_line(command: &mut Command) -> (Running, String) {
    let mut child = Running(
        command
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the command"),
    );
    let mut line = String::new();
    let stdout = child.0.stdout.take().expect("piped standard output");
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read its standard output");
    (child, line)
}
