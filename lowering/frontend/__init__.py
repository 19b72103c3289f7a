from .tracer import Tracer, constexpr_params, function_source, make_tracer, register_tle_builtin, register_tle_context, register_tle_range  # noqa: F401
