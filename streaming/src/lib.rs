pub mod mux;
pub mod spdy;
