// ThreadSanitizer annotation for the one ordering TSan cannot see: a send buffer is only read by
// the kernel inside sendmsg(), and a reply that overwrites it (in-place push_pull) can only exist
// after the peer received those bytes, i.e. after that sendmsg copied them. TSan does not know
// about the peer, so the sendmsg read is hidden from it (and only it). No-op in other builds.
// BYTEPS_UNDER_TSAN is defined in ThreadSanitizer builds (what TSan cannot run is left out there,
// saying so).
#pragma once

#if defined(__SANITIZE_THREAD__)
#define BYTEPS_UNDER_TSAN 1
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#define BYTEPS_TSAN_IGNORE_BEGIN() __tsan_ignore_thread_begin()
#define BYTEPS_TSAN_IGNORE_END() __tsan_ignore_thread_end()
#else
#define BYTEPS_TSAN_IGNORE_BEGIN() ((void)0)
#define BYTEPS_TSAN_IGNORE_END() ((void)0)
#endif
