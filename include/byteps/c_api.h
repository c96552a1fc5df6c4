/* byteps C API: the one framework-neutral entry point (the Python plugins are built on it).
 *
 * Conventions: functions returning int give 0 (or a non-negative value) on success and -1 on
 * failure; byteps_last_error() then returns a message (thread-local, valid until the next call on
 * this thread) that names the tensor, node or variable involved, and byteps_last_error_code()
 * a byteps_status code. Thread-safe: any thread may call any function after byteps_init().
 */
#ifndef BYTEPS_C_API_H_
#define BYTEPS_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types (BytePS/mshadow codes; bfloat16, int16 and bool are ours). A bool is one byte, 0 or
 * 1; bools can be gathered, broadcast and reduced by min, max and product, but not summed. */
enum byteps_dtype {
  BYTEPS_FLOAT32 = 0,
  BYTEPS_FLOAT64 = 1,
  BYTEPS_FLOAT16 = 2,
  BYTEPS_UINT8 = 3,
  BYTEPS_INT32 = 4,
  BYTEPS_INT8 = 5,
  BYTEPS_INT64 = 6,
  BYTEPS_BFLOAT16 = 7,
  BYTEPS_INT16 = 8,
  BYTEPS_BOOL = 9,
};

enum byteps_status {
  BYTEPS_OK = 0,
  BYTEPS_INVALID_ARGUMENT = 1,
  BYTEPS_PRECONDITION = 2,
  BYTEPS_UNAVAILABLE = 3,
  BYTEPS_DEADLINE_EXCEEDED = 4,
  BYTEPS_ABORTED = 5,
  BYTEPS_PROTOCOL = 6,
  BYTEPS_INTERNAL = 7,
  /* The workers disagree on a tensor (its size, dtype, reduction or declared attributes): the
   * servers fail the operation on every worker alike, naming what differs and each one's value. */
  BYTEPS_MISMATCH = 8,
};
/* Reductions (byteps_reduce_async_on). Element-wise: sum, min, max, product; for bool: min and
 * product are a logical and, max a logical or; a sum of bools is refused. Integers wrap like the
 * sum. BYTEPS_OP_ADASUM: Horovod's Adasum of the whole tensors in worker rank order (float16,
 * float32, float64; the tensor is never partitioned, so it must fit in one message; one process
 * per host for now). */
enum byteps_reduce_op {
  BYTEPS_OP_SUM = 0,
  BYTEPS_OP_MIN = 1,
  BYTEPS_OP_MAX = 2,
  BYTEPS_OP_PRODUCT = 3,
  BYTEPS_OP_ADASUM = 4,
};

typedef int64_t byteps_handle_t;

/* Where a tensor's bytes live (byteps_push_pull_async_on). BYTEPS_DEVICE_FAKE is the test
 * backend: its "device memory" is host memory that only its stream threads touch. */
enum byteps_device_kind {
  BYTEPS_DEVICE_CPU = 0,
  BYTEPS_DEVICE_CUDA = 1,
  BYTEPS_DEVICE_FAKE = 2,
};

/* Reads the configuration from the environment and joins the job (blocks until every worker and
 * server has registered, or BYTEPS_START_TIMEOUT). Idempotent. */
int byteps_init(void);
/* Reads and checks the configuration now (errors name the variable); joins the job on the first
 * call that needs it (declare, push_pull, rank...), which then blocks as byteps_init does. */
int byteps_lazy_init(void);
/* Finishes outstanding work, leaves the job together with the other workers. Idempotent. */
int byteps_shutdown(void);
/* 1 after byteps_init or byteps_lazy_init, until byteps_shutdown. */
int byteps_is_initialized(void);

/* Elastic training (BytePS's suspend/resume). byteps_suspend is byteps_shutdown; the names
 * declared or pushed since byteps_init are kept. byteps_resume sets DMLC_NUM_WORKER,
 * DMLC_NUM_SERVER and (global_rank >= 0) BYTEPS_GLOBAL_RANK, joins the job those describe (the rest
 * of its environment, e.g. the scheduler's address, must be set), and declares every kept name
 * again in its first-use order, so keys and server placement are the same. */
int byteps_suspend(void);
int byteps_resume(int num_workers, int num_servers, int global_rank);

/* Global rank/size of this training process, and within its host. -1 before init. */
int byteps_rank(void);
int byteps_size(void);
int byteps_local_rank(void);
int byteps_local_size(void);

/* Declares a tensor name. Keys come from the names (the scheduler's name service answers every
 * worker alike on a name's first use), so workers may declare and use tensors in any order.
 * Returns its key, or -1. */
int byteps_declare(const char* name);
/* Declares with size and dtype: its partitions are placed on servers by bytes right away. */
int byteps_declare_tensor(const char* name, size_t bytes, int dtype);

/* Starts the sum (average != 0: the mean) of `bytes` bytes at `input` over all workers, written to
 * `output` (may equal input). Both buffers must stay valid until the handle completes. Returns a
 * handle (> 0) or -1. priority: higher is sent first. */
byteps_handle_t byteps_push_pull_async(const char* name, const void* input, void* output, size_t bytes,
                                       int dtype, int average, int priority);
/* byteps_push_pull_async for a tensor in a device's memory: `input` and `output` are pointers of
 * device `device_index` of `device_kind`, written by work queued on `stream` (the framework's
 * current stream, a cudaStream_t for CUDA; NULL: the device's default stream). The core records
 * an event on `stream` now and copies each partition out once that work is done; the result is
 * copied back, and `stream` made to wait for it, before the handle completes. The CPU never
 * waits on `stream`. A CUDA tensor in a build without CUDA, or with no such GPU, is an error
 * that says so. Returns a handle (> 0) or -1. */
byteps_handle_t byteps_push_pull_async_on(const char* name, const void* input, void* output, size_t bytes,
                                          int dtype, int average, int priority, int device_kind, int device_index,
                                          void* stream);
/* byteps_push_pull_async_on with a reduction: `reduce_op` (enum byteps_reduce_op) combines the
 * workers' tensors element by element, on the servers and within a host. average != 0 divides a
 * sum by the number of workers (an error with any other op). `attrs` (NULL or "": none) is a list
 * "key=value;key=value" of declaration attributes (e.g. "shape=2x3"), compared by the servers
 * with every other worker's on the tensor's first use: a difference (as a different size, dtype or
 * op) fails the operation on every worker with BYTEPS_MISMATCH, naming the attribute and each
 * worker's value. A name used again with another size, dtype, op or attributes, once its earlier
 * operations completed, gets a new key on every worker (while one is in flight: an error).
 * Returns a handle or -1. */
byteps_handle_t byteps_reduce_async_on(const char* name, const void* input, void* output, size_t bytes, int dtype,
                                       int reduce_op, int average, const char* attrs, int priority, int device_kind,
                                       int device_index, void* stream);
/* 1 when this build has the backend of `device_kind` (cpu and fake always; cuda when built with
 * the CUDA toolkit), else 0. */
int byteps_device_built(int device_kind);
/* Starts an allgather: every worker contributes `slice_bytes` bytes at `input`, which belong at
 * byte `slice_offset` of the `total_bytes` at `output`; when the handle completes, `output` holds
 * every worker's slice (the slices must tile it: the caller learns the others' sizes first, e.g.
 * with a push_pull). The servers concatenate (each worker pushes only its slice). Another total
 * under the same name, once the earlier allgather completed, is a new key. On hosts with several processes
 * (BYTEPS_LOCAL_SIZE > 1) it is a sum of zero-padded outputs instead. Returns a handle or -1. */
byteps_handle_t byteps_allgather_async(const char* name, const void* input, size_t slice_bytes, void* output,
                                       size_t total_bytes, size_t slice_offset, int dtype, int priority);
/* byteps_allgather_async for tensors in a device's memory (as byteps_push_pull_async_on). */
byteps_handle_t byteps_allgather_async_on(const char* name, const void* input, size_t slice_bytes, void* output,
                                          size_t total_bytes, size_t slice_offset, int dtype, int priority,
                                          int device_kind, int device_index, void* stream);
/* byteps_allgather_async_on with declaration attributes (as byteps_reduce_async_on's `attrs`). */
byteps_handle_t byteps_allgather_async_ex(const char* name, const void* input, size_t slice_bytes, void* output,
                                          size_t total_bytes, size_t slice_offset, int dtype, int priority,
                                          int device_kind, int device_index, void* stream, const char* attrs);
/* Starts a broadcast of `bytes` bytes at `buffer` from root_rank to every worker, in place: an
 * allgather in which only the root has a slice (the servers forward its bytes; the others push
 * none). Returns a handle (> 0) or -1. */
byteps_handle_t byteps_broadcast_async(const char* name, void* buffer, size_t bytes, int dtype, int root_rank,
                                       int priority);
/* byteps_broadcast_async for a tensor in a device's memory (as byteps_push_pull_async_on). */
byteps_handle_t byteps_broadcast_async_on(const char* name, void* buffer, size_t bytes, int dtype, int root_rank,
                                          int priority, int device_kind, int device_index, void* stream);
/* byteps_broadcast_async_on with declaration attributes (as byteps_reduce_async_on's `attrs`; e.g.
 * "root=0", so that workers naming different roots fail alike with BYTEPS_MISMATCH). */
byteps_handle_t byteps_broadcast_async_ex(const char* name, void* buffer, size_t bytes, int dtype, int root_rank,
                                          int priority, int device_kind, int device_index, void* stream,
                                          const char* attrs);
/* 1 when done, 0 while running, -1 when the operation failed (see byteps_last_error). */
int byteps_poll(byteps_handle_t handle);
/* Waits up to timeout_s seconds (< 0: BYTEPS_TIMEOUT). 0 when done, -1 on failure or timeout. */
int byteps_wait(byteps_handle_t handle, double timeout_s);
/* Horovod's join(): this worker has run out of data. Waits for its own operations in flight, then
 * until every worker has joined; meanwhile the others' reductions go on with this worker counted
 * as zeros (an average still divides by the job's size), and their allgathers and broadcasts fail
 * (BYTEPS_MISMATCH). Returns the rank of the last worker to join (the same on every worker), or
 * -1 on failure. It waits as long as the job is alive: a worker that stops or dies ends it. One
 * process per host for now. */
int byteps_join(void);
/* Forgets a finished handle. */
void byteps_release(byteps_handle_t handle);

/* BytePS's get_pushpull_speed: the oldest unread sample, the input bytes of the push_pulls that
 * completed in a window of at least 10 s, per second, in MB/s, and when the window closed (ms
 * since the epoch); *ms_since_epoch = 0 and *mb_per_s = -5.0 when there is none (or
 * BYTEPS_TELEMETRY_ON=0). At most 1024 samples are kept. Returns 0, or -1 for NULL pointers. */
int byteps_get_pushpull_speed(int64_t* ms_since_epoch, double* mb_per_s);

/* Gradient codecs (src/compress/, docs/wire-format.md "Compressed payloads"): one tensor part of
 * `count` elements of `dtype` compressed or decoded with the compression parameters a tensor is
 * declared with, "key=value" pairs joined by ';' (the original's keys: "compressor=topk;k=0.01",
 * "compressor=onebit;scaling=true", "compressor=dithering;k=4;partition=natural", "cast=fp16").
 * `tensor` names the tensor in errors. No job is needed. key and round choose randomk's and
 * dithering's random draws (the same on every process for the same seed, key and round). */
/* The most bytes byteps_codec_compress writes, or -1 (bad parameters: the error names the key). */
int64_t byteps_codec_max_bytes(const char* params, const char* tensor, int dtype, size_t count);
/* Compresses in[0..count) into out[0..cap); the payload's bytes, or -1. */
int64_t byteps_codec_compress(const char* params, const char* tensor, int dtype, const void* in, size_t count,
                              uint64_t key, uint64_t round, void* out, size_t cap);
/* Decodes payload[0..len) into out (count elements of dtype); with add != 0, adds it onto out as
 * float32 (the servers' sum). A damaged or foreign payload: -1 (BYTEPS_PROTOCOL) and out untouched. */
int byteps_codec_decompress(const char* params, const char* tensor, int dtype, const void* payload, size_t len,
                            size_t count, void* out, int add);

/* Gradient compression in a job (docs/wire-format.md "Compressed payloads"): a tensor whose
 * push_pull attrs carry compression keys ("compressor=topk;k=0.01;ef=vanilla") is compressed
 * before it goes to the servers, when it has at least BYTEPS_MIN_COMPRESS_BYTES. */
/* The learning rate of the coming step (> 0, finite): error feedback (ef=vanilla) scales its
 * residual by the previous one / lr. May be called before init; kept for later engines.
 * 0, or -1 (BYTEPS_INVALID_ARGUMENT). */
int byteps_set_learning_rate(double lr);
/* The compression parameters of every later push_pull of `name` whose attrs carry no compression
 * keys (MXNet's byteps_declare_tensor(name, byteps_compressor_type="topk", ...)): n key/value
 * pairs, keys as ParseParams takes them, optionally with a leading "byteps_" (stripped:
 * "byteps_compressor_type" -> "compressor_type"). Checked now: a bad key or value is -1
 * (BYTEPS_INVALID_ARGUMENT) naming the tensor. May be called before init; a later call for the
 * same name replaces the earlier one. */
int byteps_declare_tensor_params(const char* name, int n, const char** keys, const char** values);

const char* byteps_last_error(void);
int byteps_last_error_code(void);

#ifdef __cplusplus
}
#endif

#endif /* BYTEPS_C_API_H_ */
