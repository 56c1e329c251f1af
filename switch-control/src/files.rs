//! Reading the files operators hand the tools, with a size limit checked
//! before the bytes are held: `inagg ctl apply -f /dev/zero` must be a
//! clear error, not a process that grows until the kernel kills it.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The most a cluster or topology file may hold: far beyond any real one.
pub const CONFIG_LIMIT: u64 = 4 << 20;

/// The most a P4Info or a bmv2 JSON may hold (p4c's for this project's
/// programs are under a few MiB).
pub const PROGRAM_LIMIT: u64 = 256 << 20;

/// The bytes of `path`, refused when there are more than `limit` of them:
/// a regular file by its size, before reading; anything else (a pipe, a
/// device) once it has yielded more than `limit`.
pub fn read_limited(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() && meta.len() > limit {
        return Err(too_large(meta.len(), limit));
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large_stream(limit));
    }
    Ok(bytes)
}

/// [`read_limited`] as UTF-8 text.
pub fn read_text_limited(path: &Path, limit: u64) -> io::Result<String> {
    String::from_utf8(read_limited(path, limit)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// A size in words: bytes, KiB, MiB or GiB.
pub fn size_words(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} bytes"),
    }
}

fn too_large(len: u64, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{} is more than the {} allowed",
            size_words(len),
            size_words(limit)
        ),
    )
}

fn too_large_stream(limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "it yields more than the {} allowed (not a regular file: read up to the limit)",
            size_words(limit)
        ),
    )
}

/// A configuration file's text (cluster and controller files), at most
/// [`CONFIG_LIMIT`] bytes; an error names the file.
pub fn read_config(path: &str) -> Result<String, crate::target::ControlError> {
    read_text_limited(Path::new(path), CONFIG_LIMIT).map_err(|e| {
        crate::target::ControlError::Config {
            path: path.into(),
            message: format!("cannot read: {e}"),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_and_oversized_inputs_are_refused_by_the_limit() {
        let err = read_limited(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(
            err.to_string().contains("more than the 1.0 MiB allowed"),
            "{err}"
        );
        let dir = std::env::temp_dir().join(format!("inagg-files-{}", std::process::id()));
        std::fs::write(&dir, vec![b'x'; 2000]).unwrap();
        let err = read_limited(&dir, 1000).unwrap_err();
        assert!(
            err.to_string()
                .contains("2.0 KiB is more than the 1000 bytes allowed"),
            "{err}"
        );
        assert_eq!(read_limited(&dir, 2000).unwrap().len(), 2000);
        assert_eq!(read_text_limited(&dir, 4000).unwrap().len(), 2000);
        std::fs::write(&dir, [0xff, 0xfe]).unwrap();
        assert!(read_text_limited(&dir, 10)
            .unwrap_err()
            .to_string()
            .contains("UTF-8"));
        let _ = std::fs::remove_file(dir);
    }
}
