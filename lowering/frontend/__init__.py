from .extensions import register_tle_builtin, register_tle_context, register_tle_range  # noqa: F401
from .source import constexpr_params, function_source  # noqa: F401
from .tensor_desc import DescriptorParam  # noqa: F401
from .tracer import Tracer, make_tracer  # noqa: F401
