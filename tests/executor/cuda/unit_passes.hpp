// One unit's backward on the host and on the device, as the unit tests drive both: the full
// backward, or the zero-bubble split (input gradient, then weight gradients).
#pragma once

#include <span>

#include "executor/cuda/buffers.hpp"

namespace stagecraft::executor::test {

template <class HostLayer, class HostVec, class HostCache, class DeviceLayer, class DeviceCache>
void backward_both(bool split, const HostLayer& host, const HostVec& p, const HostVec& hd, HostVec& hdx, HostVec& hgrads,
                   HostCache& hc, const DeviceLayer& dev, const cuda::DeviceBuffer& dp, const cuda::DeviceBuffer& dd,
                   cuda::DeviceBuffer& ddx, cuda::DeviceBuffer& dgrads, DeviceCache& dc) {
  if (split) {
    host.backward_input(p, hd, hdx, hc);
    host.backward_weight(hgrads, hc);
    dev.backward_input(std::span<const float>(dp.view()), std::span<const float>(dd.view()), ddx.view(), dc);
    dev.backward_weight(dgrads.view(), dc);
  } else {
    host.backward(p, hd, hdx, hgrads, hc);
    dev.backward(std::span<const float>(dp.view()), std::span<const float>(dd.view()), ddx.view(), dgrads.view(), dc);
  }
}

}  // namespace stagecraft::executor::test
