// The umbrella header: everything in tessel's public API.
#pragma once

#include "tessel/config.h"
#include "tessel/device_name.h"
#include "tessel/dtype.h"
#include "tessel/error.h"
#include "tessel/float16.h"
#include "tessel/layout.h"
#include "tessel/mesh.h"
#include "tessel/reduce_op.h"
#include "tessel/shape.h"
#include "tessel/shard_map.h"
#include "tessel/shard_range.h"
#include "tessel/sharding_spec.h"
#include "tessel/tensor.h"
