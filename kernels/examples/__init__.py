"""Stand-alone example kernels (installed as tle.kernels.examples): kernels written to show a language
feature or to reproduce a reference kernel, each with its example launch for `tle show` / `tle compare`, the
kernel tests and the goldens. They are not operators of tle.ops; the operators' modules are one folder up."""
