# Precompiled headers: the standard and fmt headers nearly every file of the library includes,
# parsed once per target instead of once per file (about a quarter of the library's compile
# CPU time). Off when a compiler launcher (ccache) is set: GCC's .gch differs from one build to
# the next, so ccache could never reuse an object compiled against it.
if(CMAKE_CXX_COMPILER_LAUNCHER)
  set(tessel_pch_default OFF)
else()
  set(tessel_pch_default ON)
endif()
option(TESSEL_PRECOMPILE_HEADERS "Precompile common headers (off under ccache)" ${tessel_pch_default})

function(tessel_precompile_common_headers target)
  if(NOT TESSEL_PRECOMPILE_HEADERS)
    return()
  endif()
  target_precompile_headers(${target} PRIVATE
    <algorithm> <array> <atomic> <chrono> <cmath> <condition_variable> <cstdint> <cstring>
    <deque> <functional> <limits> <map> <memory> <mutex> <optional> <ostream> <sstream> <string>
    <string_view> <thread> <unordered_map> <utility> <variant> <vector>
    <fmt/format.h> <fmt/ranges.h>)
endfunction()
