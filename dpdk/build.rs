//! Finds DPDK with pkg-config, generates bindings for the control-path API
//! with bindgen and compiles the fast-path shim (shim.c) with cc. Both get
//! the full `pkg-config --cflags libdpdk` output: it carries
//! `-include rte_config.h` and the `-march` the library was built for, and
//! the inline functions differ without them.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shim.h");
    println!("cargo:rerun-if-changed=shim.c");
    let dpdk = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .unwrap_or_else(|e| {
            panic!(
                "DPDK 22.11 or later not found with pkg-config ({e}).\n\
                 Install it: apt-get install dpdk-dev libdpdk-dev pkg-config clang libclang-dev"
            )
        });
    let cflags = cflags();
    compile_shim(&dpdk, &cflags);
    generate_bindings(&cflags);
}

/// `pkg-config --cflags libdpdk`, split into arguments.
fn cflags() -> Vec<String> {
    let out = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("run pkg-config --cflags libdpdk");
    assert!(out.status.success(), "pkg-config --cflags libdpdk failed");
    String::from_utf8(out.stdout)
        .expect("pkg-config output is UTF-8")
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn compile_shim(dpdk: &pkg_config::Library, cflags: &[String]) {
    let mut build = cc::Build::new();
    build.file("shim.c").warnings(true).opt_level(3);
    for path in &dpdk.include_paths {
        build.include(path);
    }
    for flag in cflags {
        build.flag(flag);
    }
    build.compile("inagg_dpdk_shim");
}

fn generate_bindings(cflags: &[String]) {
    let bindings = bindgen::Builder::default()
        .header("wrapper.h")
        .clang_args(cflags)
        .allowlist_function("rte_eal_(init|cleanup)")
        .allowlist_function("rte_eth_dev_(count_avail|configure|start|stop|close|info_get|socket_id|get_port_by_name|get_name_by_port|set_mtu|get_mtu|is_valid_port)")
        .allowlist_function("rte_eth_(rx|tx)_queue_setup")
        .allowlist_function("rte_eth_(macaddr_get|promiscuous_enable|stats_get|stats_reset|link_get_nowait)")
        .allowlist_function("rte_pktmbuf_pool_create")
        .allowlist_function("rte_mempool_(free|avail_count)")
        .allowlist_function("rte_strerror")
        .allowlist_function("rte_socket_id")
        .allowlist_function("rte_thread_(register|unregister)")
        .allowlist_function("inagg_.*")
        .allowlist_type("rte_eth_conf|rte_eth_dev_info|rte_ether_addr|rte_eth_stats|rte_eth_link")
        .opaque_type("rte_mbuf")
        .opaque_type("rte_mempool")
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .generate()
        .expect("bindgen over the DPDK headers");
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    bindings.write_to_file(out).expect("write bindings.rs");
}
