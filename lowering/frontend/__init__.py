from .tracer import Tracer, constexpr_params, function_source, make_tracer, register_tle_builtin  # noqa: F401
