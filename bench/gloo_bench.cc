/* SPDX-License-Identifier: MIT */
// gloo_bench.cc: the ftbench measurement (same flags, table and CSV) with Gloo's ring allreduce over TCP.

// --coll reduce_scatter runs gloo::ReduceScatterHalvingDoubling (Gloo has no
// ring reduce-scatter), in place over the whole vector, after a copy of the
// input when out of place; --coll allgather runs gloo::allgather (a ring).
//
// Runs under ftcc-run: rank, world size and a fresh rendezvous directory come
// from FTCC_RANK, FTCC_WORLD_SIZE and FTCC_RENDEZVOUS; Gloo's FileStore
// rendezvous lives in that directory. Uses the "new style" collectives
// (gloo::allreduce with AllreduceOptions, algorithm RING), the ones PyTorch's
// ProcessGroupGloo calls. Options and their unbound buffers are built once
// per size and reused, like the MPI driver's buffers, so the timed loop holds
// nothing but gloo::allreduce calls.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <functional>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench_common.h"

namespace {

using ReduceFn = void (*)(void *, const void *, const void *, size_t);

struct BenchError : std::exception {
	explicit BenchError(std::string m) : msg(std::move(m)) {}
	const char *what() const noexcept override { return msg.c_str(); }
	std::string msg;
};

int env_int(const char *name)
{
	const char *v = std::getenv(name);
	char *end = nullptr;
	long x;

	if (v == nullptr || *v == '\0')
		throw BenchError(std::string(name) + " is not set (run under ftcc-run)");
	x = std::strtol(v, &end, 10);
	if (*end != '\0' || x < 0 || x > 1 << 20)
		throw BenchError(std::string(name) + " is malformed: '" + v + "'");
	return static_cast<int>(x);
}

template <typename T>
ReduceFn reduce_fn(enum bench_op op)
{
	switch (op) {
	case BENCH_SUM: return &gloo::sum<T>;
	case BENCH_PROD: return &gloo::product<T>;
	case BENCH_MIN: return &gloo::min<T>;
	case BENCH_MAX: return &gloo::max<T>;
	default: return nullptr;
	}
}

// Gloo has no avg, and its float16 kernels are not exported by Debian's
// libgloo; bfloat16 it does not know at all.
ReduceFn pick_reduce(enum bench_dtype d, enum bench_op op)
{
	switch (d) {
	case BENCH_FLOAT32: return reduce_fn<float>(op);
	case BENCH_FLOAT64: return reduce_fn<double>(op);
	case BENCH_INT32: return reduce_fn<int32_t>(op);
	case BENCH_INT64: return reduce_fn<int64_t>(op);
	case BENCH_UINT8: return reduce_fn<uint8_t>(op);
	default: return nullptr;
	}
}

// Typed setInput/setOutput: elementSize is what the ring uses to cut chunks.
void set_buffers(gloo::AllreduceOptions &opts, enum bench_dtype d, void *in, void *out, size_t count)
{
	switch (d) {
	case BENCH_FLOAT32:
		if (in != nullptr)
			opts.setInput(static_cast<float *>(in), count);
		opts.setOutput(static_cast<float *>(out), count);
		break;
	case BENCH_FLOAT64:
		if (in != nullptr)
			opts.setInput(static_cast<double *>(in), count);
		opts.setOutput(static_cast<double *>(out), count);
		break;
	case BENCH_INT32:
		if (in != nullptr)
			opts.setInput(static_cast<int32_t *>(in), count);
		opts.setOutput(static_cast<int32_t *>(out), count);
		break;
	case BENCH_INT64:
		if (in != nullptr)
			opts.setInput(static_cast<int64_t *>(in), count);
		opts.setOutput(static_cast<int64_t *>(out), count);
		break;
	case BENCH_UINT8:
		if (in != nullptr)
			opts.setInput(static_cast<uint8_t *>(in), count);
		opts.setOutput(static_cast<uint8_t *>(out), count);
		break;
	default:
		throw BenchError("unsupported dtype");
	}
}

struct Buf {
	void *p = nullptr;
	explicit Buf(size_t bytes) : p(bench_alloc(bytes))
	{
		if (p == nullptr)
			throw BenchError("out of memory");
	}
	~Buf() { std::free(p); }
	Buf(const Buf &) = delete;
	Buf &operator=(const Buf &) = delete;
};

const uint32_t kTagBench = 1, kTagCheck = 2, kTagMeta = 3, kTagBarrier = 4;

void barrier(const std::shared_ptr<gloo::Context> &ctx)
{
	gloo::BarrierOptions b(ctx);

	b.setTag(kTagBarrier);
	gloo::barrier(b);
}

// In-place allreduce of a small double/int64 vector, for the max over ranks.
void allreduce_meta(const std::shared_ptr<gloo::Context> &ctx, double *v, size_t n, ReduceFn fn)
{
	gloo::AllreduceOptions o(ctx);

	o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
	o.setOutput(v, n);
	o.setReduceFunction(fn);
	o.setTag(kTagMeta);
	gloo::allreduce(o);
}

void check_size(const std::shared_ptr<gloo::Context> &ctx, const struct bench_opts &o, void *send,
		void *recv, size_t count, size_t bytes, ReduceFn fn)
{
	gloo::AllreduceOptions opts(ctx);
	size_t idx = 0, bad;
	double got = 0, want = 0, nbad;

	bench_fill(o.in_place ? recv : send, count, o.dtype, o.op, ctx->rank);
	if (!o.in_place)
		std::memset(recv, 0xa5, bytes);
	opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
	set_buffers(opts, o.dtype, o.in_place ? nullptr : send, recv, count);
	opts.setReduceFunction(fn);
	opts.setTag(kTagCheck);
	gloo::allreduce(opts);
	bad = bench_verify(recv, count, o.dtype, o.op, ctx->size, &idx, &got, &want);
	if (bad != 0)
		std::fprintf(stderr,
			     "gloo_bench: rank %d: check failed at size %zu: %zu of %zu elements wrong, "
			     "first at [%zu]: got %g, want %g\n",
			     ctx->rank, bytes, bad, count, idx, got, want);
	nbad = static_cast<double>(bad);
	allreduce_meta(ctx, &nbad, 1, &gloo::sum<double>);
	if (nbad != 0)
		throw BenchError("check failed at size " + std::to_string(bytes) + ": " +
				 std::to_string(static_cast<long long>(nbad)) + " wrong elements over all ranks");
}

// The reduce-scatter or allgather of a vector of count elements of type T
// (block elements per rank), as one callable for the timed loop.
template <typename T>
std::function<void()> half_ring(const std::shared_ptr<gloo::Context> &ctx, const struct bench_opts &o,
				void *send, void *recv, size_t count, size_t block)
{
	T *out = static_cast<T *>(recv);
	size_t bytes = block * static_cast<size_t>(ctx->size) * sizeof(T);

	(void)count;
	if (o.coll == BENCH_ALLGATHER) {
		auto opts = std::make_shared<gloo::AllgatherOptions>(ctx);
		if (!o.in_place)
			opts->setInput(static_cast<T *>(send), block);
		opts->setOutput(out, block * static_cast<size_t>(ctx->size));
		opts->setTag(kTagBench);
		return [opts] { gloo::allgather(*opts); };
	}
	if (o.op != BENCH_SUM)
		throw BenchError("gloo_bench: reduce_scatter with op sum only");
	auto rs = std::make_shared<gloo::ReduceScatterHalvingDoubling<T>>(
		ctx, std::vector<T *>{out}, static_cast<int>(block * static_cast<size_t>(ctx->size)),
		std::vector<int>(static_cast<size_t>(ctx->size), static_cast<int>(block)));
	if (o.in_place)
		return [rs] { rs->run(); };
	return [rs, out, send, bytes] {
		std::memcpy(out, send, bytes);
		rs->run();
	};
}

std::function<void()> half_ring_for(const std::shared_ptr<gloo::Context> &ctx, const struct bench_opts &o,
				    void *send, void *recv, size_t count)
{
	size_t block = bench_block(count, ctx->size);

	switch (o.dtype) {
	case BENCH_FLOAT32: return half_ring<float>(ctx, o, send, recv, count, block);
	case BENCH_FLOAT64: return half_ring<double>(ctx, o, send, recv, count, block);
	case BENCH_INT32: return half_ring<int32_t>(ctx, o, send, recv, count, block);
	case BENCH_INT64: return half_ring<int64_t>(ctx, o, send, recv, count, block);
	default: throw BenchError("gloo_bench: reduce_scatter and allgather take float32, float64, int32, int64");
	}
}

void run_size(const std::shared_ptr<gloo::Context> &ctx, const struct bench_opts &o, const char *impl,
	      size_t bytes, ReduceFn fn)
{
	size_t esize = bench_dtype_size(o.dtype), count = bytes / esize;
	int iters, warmup;
	struct bench_result res;

	bytes = count * esize;
	if (count == 0)
		return;
	iters = bench_iters_for(&o, bytes);
	warmup = bench_warmup_for(&o, iters);
	Buf recv(bytes);
	std::unique_ptr<Buf> send;
	if (!o.in_place)
		send.reset(new Buf(bytes));
	void *sp = send ? send->p : nullptr;
	std::vector<double> times(static_cast<size_t>(iters));

	if (o.check)
		check_size(ctx, o, sp, recv.p, count, bytes, fn);
	if (o.in_place)
		std::memset(recv.p, 0, bytes);
	else
		bench_fill(sp, count, o.dtype, o.op, ctx->rank);

	gloo::AllreduceOptions opts(ctx);
	opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
	set_buffers(opts, o.dtype, sp, recv.p, count);
	opts.setReduceFunction(fn);
	opts.setTag(kTagBench);
	std::function<void()> call = [&opts] { gloo::allreduce(opts); };
	if (o.coll != BENCH_ALLREDUCE)
		call = half_ring_for(ctx, o, sp, recv.p, count);

	for (int i = 0; i < warmup; i++)
		call();
	barrier(ctx);
	for (int i = 0; i < iters; i++) {
		double t0 = bench_now();

		call();
		times[static_cast<size_t>(i)] = bench_now() - t0;
	}
	allreduce_meta(ctx, times.data(), times.size(), &gloo::max<double>);
	bench_summarize(times.data(), iters, bytes, count, ctx->size, o.coll, &res);
	if (ctx->rank == 0) {
		bench_print_row(stdout, &res, o.check);
		if (o.csv != nullptr) {
			int err = bench_csv_append(o.csv, impl, "tcp", ctx->size, &res);

			if (err != 0)
				throw BenchError(std::string("cannot append to ") + o.csv + ": " + std::strerror(-err));
		}
	}
}

void report_rss(const std::shared_ptr<gloo::Context> &ctx)
{
	std::vector<double> rss(static_cast<size_t>(ctx->size), 0.0);
	double max = 0;

	rss[static_cast<size_t>(ctx->rank)] = static_cast<double>(bench_peak_rss_kib());
	allreduce_meta(ctx, rss.data(), rss.size(), &gloo::max<double>);
	if (ctx->rank != 0)
		return;
	std::printf("# peak RSS (MiB): rank 0 (own) %.1f; per rank:",
		    static_cast<double>(bench_peak_rss_kib()) / 1024.0);
	for (double r : rss) {
		std::printf(" %.1f", r / 1024.0);
		if (r > max)
			max = r;
	}
	std::printf("; max %.1f\n", max / 1024.0);
	std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv)
{
	struct bench_opts o;
	const char *env_rank = std::getenv("FTCC_RANK");
	int rank = -1;

	int rc = bench_parse_args(argc, argv, &o, env_rank == nullptr || std::strcmp(env_rank, "0") == 0);
	if (rc != 0)
		return rc > 0 ? 0 : 2;
	if (o.coll == BENCH_BROADCAST) {
		std::fprintf(stderr, "gloo_bench: no broadcast\n");
		return 2;
	}
	try {
		rank = env_int("FTCC_RANK");
		int size = env_int("FTCC_WORLD_SIZE");
		const char *dir = std::getenv("FTCC_RENDEZVOUS");
		if (dir == nullptr || *dir == '\0')
			throw BenchError("FTCC_RENDEZVOUS is not set (run under ftcc-run)");
		if (size < 1 || rank >= size)
			throw BenchError("FTCC_RANK/FTCC_WORLD_SIZE out of range");
		ReduceFn fn = pick_reduce(o.dtype, o.op);
		if (fn == nullptr)
			throw BenchError(std::string("gloo_bench does not support dtype ") +
					 bench_dtype_name(o.dtype) + " with op " + bench_op_name(o.op));
		const char *impl = o.label != nullptr ? o.label : "gloo";

		gloo::rendezvous::FileStore file_store(dir);
		gloo::rendezvous::PrefixStore store("gloo_bench", file_store);
		gloo::transport::tcp::attr attr;
		const char *host = std::getenv("GLOO_BENCH_HOST");
		attr.hostname = host != nullptr && *host != '\0' ? host : "127.0.0.1";
		auto dev = gloo::transport::tcp::CreateDevice(attr);
		auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
		// Default is 30 s; 256 MiB on 8 ranks sharing 2 cores can exceed it.
		ctx->setTimeout(std::chrono::seconds(600));
		ctx->connectFullMesh(store, dev);

		if (rank == 0)
			bench_print_header(stdout, impl, "tcp", size, &o);
		for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
			run_size(ctx, o, impl, bytes, fn);
			if (bytes > SIZE_MAX / 2)
				break;
		}
		report_rss(ctx);
	} catch (const std::exception &e) {
		std::fprintf(stderr, "gloo_bench: rank %d: %s\n", rank, e.what());
		return 1;
	}
	return 0;
}
