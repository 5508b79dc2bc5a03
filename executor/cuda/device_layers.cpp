// LayerT over the device kernels: the units' one composition (model/units_impl.hpp) instantiated
// for the GPU.
#include "executor/cuda/device_kernels.hpp"
#include "executor/model/layers_impl.hpp"

namespace stagecraft::executor {

template struct UnitCacheT<float, cuda::DeviceKernels>;
template class LayerT<float, cuda::DeviceKernels>;

}  // namespace stagecraft::executor
