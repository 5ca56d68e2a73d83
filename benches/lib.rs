//! Nothing here: the package exists for its bench targets (see Cargo.toml).
