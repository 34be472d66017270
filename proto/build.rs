fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/api.proto");
    println!("cargo:rerun-if-changed=proto/pods.proto");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Records persist the CRI configs as JSON, and verbose status prints them.
        .type_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        .message_attribute(".", "#[serde(default)]")
        .compile_protos(&["proto/api.proto", "proto/pods.proto"], &["proto"])?;
    Ok(())
}
