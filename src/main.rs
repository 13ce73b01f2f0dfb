//! The `fixgate` binary: everything is in the library's [`fixgate::main`].

fn main() {
    std::process::exit(fixgate::main());
}
