//! Gives the shared library the soname of the library it replaces, so programs linked
//! against JACK's libjack.so.0 load it through LD_LIBRARY_PATH.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libjack.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
