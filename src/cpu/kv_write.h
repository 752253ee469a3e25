// The CPU write of new tokens' latents into the paged cache, through the slot mapping.
#pragma once

#include "dcpmla/backend.h"

namespace dcpmla::cpu {

void write_kv(const KvWriteArgs& args);

}  // namespace dcpmla::cpu
