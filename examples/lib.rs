//! Nothing here: the package exists for its examples (see Cargo.toml).
