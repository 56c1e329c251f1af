//! Compiles the P4Runtime subset in `proto/` into Rust (feature `bmv2`).
//!
//! protox parses the .proto files in Rust, so no `protoc` is needed; its
//! descriptor set goes to tonic-prost-build, which writes the prost messages
//! and the tonic client and server into OUT_DIR.

fn main() {
    #[cfg(feature = "bmv2")]
    if let Err(e) = compile_protos() {
        eprintln!("error: compiling switch-control/proto: {e}");
        std::process::exit(1);
    }
}

#[cfg(feature = "bmv2")]
fn compile_protos() -> Result<(), Box<dyn std::error::Error>> {
    const FILES: [&str; 4] = [
        "proto/google/rpc/status.proto",
        "proto/bfrt/bfruntime.proto",
        "proto/p4/config/v1/p4info.proto",
        "proto/p4/v1/p4runtime.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    for f in FILES {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(FILES, ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
