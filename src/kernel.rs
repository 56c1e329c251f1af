//! What the kernel counts about the machine's UDP traffic: losses that no
//! fault injector made, which a measurement of loss recovery must tell
//! apart from the injected ones.

use std::io::Read;

/// UDP datagrams the kernel has dropped for a full socket receive buffer
/// since boot, machine-wide (Linux's `Udp: RcvbufErrors` in
/// /proc/net/snmp); `None` where the file is missing or unreadable.
pub fn udp_receive_buffer_errors() -> Option<u64> {
    let mut text = String::new();
    std::fs::File::open("/proc/net/snmp")
        .ok()?
        // A few kilobytes; bounded all the same.
        .take(1 << 16)
        .read_to_string(&mut text)
        .ok()?;
    receive_buffer_errors(&text)
}

/// The `RcvbufErrors` column of the `Udp:` header and value lines of an
/// snmp table.
fn receive_buffer_errors(snmp: &str) -> Option<u64> {
    let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
    let names = udp.next()?;
    let values = udp.next()?;
    let column = names.split_whitespace().position(|n| n == "RcvbufErrors")?;
    values.split_whitespace().nth(column)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receive_buffer_column_is_read_from_the_udp_lines() {
        let snmp = "Ip: Forwarding DefaultTTL\nIp: 2 64\n\
                    Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 211122754 14438 3187 211148672 3187 0\n\
                    UdpLite: InDatagrams RcvbufErrors\nUdpLite: 0 9\n";
        assert_eq!(receive_buffer_errors(snmp), Some(3187));
        assert_eq!(receive_buffer_errors("Udp: RcvbufErrors\n"), None);
        assert_eq!(receive_buffer_errors("Udp: A B\nUdp: 1 2\n"), None);
        assert_eq!(receive_buffer_errors("Udp: RcvbufErrors\nUdp: x\n"), None);
    }
}
