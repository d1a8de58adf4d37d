//! `examples/every_effect.rs`, run: it panics unless the engine emitted each of the twelve
//! effects on the way (and the story ended as it says).

#[path = "../examples/every_effect.rs"]
mod every_effect;

#[test]
fn the_example_reaches_every_effect() {
    every_effect::main();
}
