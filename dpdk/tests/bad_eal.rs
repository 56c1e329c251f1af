//! EAL arguments DPDK rejects give an error that names them and says why,
//! and the process survives to report it. (Its own process: the EAL can be
//! initialised only once.)

use inagg_dpdk::{Eal, Error};

#[test]
fn wrong_eal_arguments_fail_with_a_clear_error() {
    let err = Eal::init_str("--no-huge --no-pci --this-is-not-an-eal-option").unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Eal { .. }), "{text}");
    assert!(text.contains("--this-is-not-an-eal-option"), "{text}");
    assert!(text.contains("EAL initialisation failed"), "{text}");
    // The same arguments again: the remembered failure, not a crash.
    let again = Eal::init_str("--no-huge --no-pci --this-is-not-an-eal-option").unwrap_err();
    assert_eq!(again.to_string(), text);
    assert!(matches!(Eal::get(), Err(Error::NoEal)));
}
