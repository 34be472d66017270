fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/nri.proto");
    println!("cargo:rerun-if-changed=proto/ttrpc.proto");
    prost_build::Config::new()
        .compile_protos(&["proto/nri.proto", "proto/ttrpc.proto"], &["proto"])?;
    Ok(())
}
