/* pyipu C core, umbrella header. See docs/c-api.md and examples/embed.c. */
#ifndef IPU_H
#define IPU_H
#include "ipu_common.h"
#include "ipu_alloc.h"
#include "ipu_container.h"
#include "ipu_executable.h"
#include "ipu_ring.h"
#include "ipu_session.h"
#include "ipu_runtime.h"
#include "ipu_trace.h"
#endif
