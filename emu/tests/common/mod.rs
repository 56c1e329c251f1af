//! A raw client of the emulator's control endpoint for the tests in
//! emu/tests: bytes out as they are, one answer line back.

// Each test file uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use inagg_emu::Emulator;
use serde_json::Value;

pub struct Client {
    pub reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

impl Client {
    pub fn connect(emu: &Emulator) -> Client {
        let stream = TcpStream::connect(emu.control_addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            writer: stream.try_clone().unwrap(),
            reader: BufReader::new(stream),
        }
    }

    /// Sends `bytes` as they are and reads one answer line (None: the
    /// connection closed first).
    pub fn try_ask(&mut self, bytes: &[u8]) -> Option<Value> {
        self.writer.write_all(bytes).ok()?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))),
        }
    }

    /// Sends `bytes` as they are and reads one answer line.
    pub fn ask(&mut self, bytes: &[u8]) -> Value {
        self.try_ask(bytes).expect("an answer")
    }
}
