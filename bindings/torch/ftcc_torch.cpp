/* SPDX-License-Identifier: MIT */
// ftcc_torch.cpp: the torch.distributed backend "ftcc": ProcessGroupFtcc, whose ops run in order on a worker thread.

/*
 * Every collective returns a Work at once; the worker thread runs the ops in
 * the order they were called (one ftcc communicator serves one caller at a
 * time, ftcc.h "Threads") and completes each op's future with its output
 * tensors, or with the error as a Python exception. A future runs its
 * callbacks on the thread that completes it, so the worker holds no lock of
 * ours then. Tensors are borrowed until the future completes: a
 * non-contiguous one is copied into a contiguous buffer and back.
 *
 * Rendezvous (docs/pytorch.md): under ftcc-run (FTCC_RANK and the file
 * rendezvous in the environment) ftcc's own configuration is used, which
 * rejoin needs. Otherwise the store PyTorch hands over carries the job id
 * and the peer list: rank 0 makes a random job id, every rank listens on a
 * free port for its membership on the address that reaches MASTER_ADDR
 * (held until ft_init takes that very socket over), and ftcc starts with
 * in-band membership over that peer list; rank 0 deletes the keys once its
 * ft_init returned (every rank read them by then). The token never goes there: PyTorch's stores have no
 * authentication (anyone who reaches MASTER_ADDR:MASTER_PORT reads every
 * key), so every rank must be given the same FTCC_TOKEN out of band, or
 * FTCC_AUTH=none must say to run without one; otherwise the group fails
 * to start, saying so. Any other FTCC_* variable set is honoured.
 *
 * PyTorch 1.13 backends subclass c10d::ProcessGroup; from 2.0 they subclass
 * c10d::Backend, which a ProcessGroup wraps. FtccBase names the one this
 * build derives from, by TORCH_VERSION_MAJOR; the ops' signatures are the
 * same in both. Only the 1.x path is compiled and tested here (Debian 12
 * ships 1.13); the 2.x one is written, not built.
 */

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

extern "C" {
#include <ftcc.h>
/* lib/util/sock.h: a listener handed to ft_init's, from libftcc.a (internal,
 * not in the shared library's API) */
int ft__sock_hold(int fd);
int ft__sock_unhold(void);
}

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
using FtccBase = c10d::Backend;
#define FTCC_TORCH_BASE "c10d::Backend"
#else
using FtccBase = c10d::ProcessGroup;
#define FTCC_TORCH_BASE "c10d::ProcessGroup"
#endif

namespace py = pybind11;

namespace {

[[noreturn]] void fail(const std::string &what, int rc)
{
	throw std::runtime_error("ftcc: " + what + ": " + ft_strerror(rc) + " (" +
				 ft_err_name(rc) + ")");
}

enum ft_dtype dtype_of(const at::Tensor &t)
{
	switch (t.scalar_type()) {
	case at::kFloat: return FT_FLOAT32;
	case at::kDouble: return FT_FLOAT64;
	case at::kHalf: return FT_FLOAT16;
	case at::kBFloat16: return FT_BFLOAT16;
	case at::kInt: return FT_INT32;
	case at::kLong: return FT_INT64;
	case at::kByte: return FT_UINT8;
	default:
		throw std::invalid_argument(std::string("ftcc: tensors of ") +
					    c10::toString(t.scalar_type()) +
					    " are not supported (float32, float64, float16, "
					    "bfloat16, int32, int64, uint8 are)");
	}
}

enum ft_op op_of(const c10d::ReduceOp &op)
{
	switch (op) {
	case c10d::ReduceOp::SUM: return FT_SUM;
	case c10d::ReduceOp::AVG: return FT_AVG;
	case c10d::ReduceOp::PRODUCT: return FT_PROD;
	case c10d::ReduceOp::MIN: return FT_MIN;
	case c10d::ReduceOp::MAX: return FT_MAX;
	default:
		throw std::invalid_argument("ftcc: reduce op not supported (SUM, AVG, PRODUCT, "
					    "MIN and MAX are)");
	}
}

void check_cpu(const at::Tensor &t)
{
	if (!t.device().is_cpu())
		throw std::invalid_argument("ftcc: only CPU tensors are supported, not " +
					    t.device().str());
	if (t.is_sparse())
		throw std::invalid_argument("ftcc: sparse tensors are not supported");
}

void check_one(const std::vector<at::Tensor> &v, const char *what)
{
	if (v.size() != 1)
		throw std::invalid_argument(std::string("ftcc: ") + what +
					    " takes exactly one tensor per process");
	check_cpu(v[0]);
	(void)dtype_of(v[0]);
}

std::string hex_random(size_t bytes)
{
	std::random_device rd;
	std::string s;
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < bytes; i++) {
		unsigned v = rd() & 0xff;
		s += digits[v >> 4];
		s += digits[v & 15];
	}
	return s;
}

std::string env(const char *name)
{
	const char *v = std::getenv(name);
	return v != nullptr ? v : "";
}

/* The address of this host that reaches MASTER_ADDR (loopback when it is
 * unset or local): where this rank's membership listener is published. */
std::string local_host()
{
	std::string master = env("MASTER_ADDR");
	struct addrinfo hints = {}, *res = nullptr;
	struct sockaddr_in me = {};
	socklen_t len = sizeof(me);
	char buf[INET_ADDRSTRLEN];
	int fd;

	if (master.empty() || master == "localhost" || master.rfind("127.", 0) == 0)
		return "127.0.0.1";
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_DGRAM;
	if (getaddrinfo(master.c_str(), "9", &hints, &res) != 0 || res == nullptr)
		return "127.0.0.1";
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	bool ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0 &&
		  getsockname(fd, (struct sockaddr *)&me, &len) == 0;
	if (fd >= 0)
		close(fd);
	freeaddrinfo(res);
	if (!ok || inet_ntop(AF_INET, &me.sin_addr, buf, sizeof(buf)) == nullptr)
		return "127.0.0.1";
	return buf;
}

/* A port of host for this rank's membership listener, held (*fd) from
 * before it is published until ft_init's listener takes this very socket
 * over (ft__sock_hold): bound without SO_REUSEADDR and listening, so that
 * no other socket, of any process or user, can bind it meanwhile. Bound
 * with SO_REUSEADDR and not listening, anyone could bind and listen there
 * first, and the job could not start. Peers that connect before ft_init
 * wait in the backlog. */
int reserve_port(const std::string &host, int *fd)
{
	struct sockaddr_in a = {};
	socklen_t len = sizeof(a);
	int port = -1;

	*fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	a.sin_family = AF_INET;
	if (*fd >= 0 && inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1 &&
	    bind(*fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(*fd, 64) == 0 &&
	    getsockname(*fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (port < 0) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		throw std::runtime_error("ftcc: no free port on " + host);
	}
	return port;
}

std::vector<uint8_t> bytes_of(const std::string &s)
{
	return std::vector<uint8_t>(s.begin(), s.end());
}

std::string string_of(const std::vector<uint8_t> &v)
{
	return std::string(v.begin(), v.end());
}

void put(char *dst, size_t cap, const std::string &s, const char *what)
{
	if (s.size() >= cap)
		throw std::runtime_error(std::string("ftcc: ") + what + " is too long");
	std::memcpy(dst, s.c_str(), s.size() + 1);
}

} // namespace

/*
 * One op's handle: wait() returns once the worker ran the op and throws its
 * error (c10d::Work's own wait, which the worker's finish() wakes; 1.13's
 * Work::create_from_future waits without throwing, so a failed op would
 * look done); getFuture() completes with the output tensors or the error.
 */
class FtccWork : public c10d::Work {
public:
	FtccWork(c10d::OpType type, std::vector<at::Tensor> outs)
		: c10d::Work(-1, type), outs_(std::move(outs)),
		  fut_(c10::make_intrusive<c10::ivalue::Future>(
			  c10::ListType::create(c10::TensorType::get())))
	{
	}

	std::vector<at::Tensor> result() override
	{
		return outs_;
	}

	c10::intrusive_ptr<c10::ivalue::Future> getFuture() override
	{
		return fut_;
	}

	/* Worker thread: the op ended (err: its error, or null). */
	void done(std::exception_ptr err)
	{
		finish(err);
		if (err)
			fut_->setError(err);
		else
			fut_->markCompleted(c10::IValue(outs_));
	}

private:
	std::vector<at::Tensor> outs_;
	c10::intrusive_ptr<c10::ivalue::Future> fut_;
};

/* What the last op did, as Python reads it (ft_op_info, and the membership after it). */
struct FtccOpInfo {
	uint64_t op_seq = 0;
	uint32_t generation = 0;
	int contributors = 0;
	int failed = 0;
	double recovery_ms = 0;
	std::vector<int> members; /* original (torch) ranks, in dense order */
};

/* The listener reserve_port holds: handed to ft_init (ft__sock_hold), taken
 * back and closed if ft_init did not take it, closed on the way out. */
struct Reserved {
	int fd = -1;
	bool handed = false;
	void hand_over()
	{
		if (fd >= 0 && ft__sock_hold(fd) != 0)
			throw std::runtime_error("ftcc: another process group is starting in "
						 "this process");
		handed = fd >= 0;
	}
	void release()
	{
		if (handed && ft__sock_unhold() < 0)
			fd = -1; /* ft_init's listener now (or closed by its failure) */
		handed = false;
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	~Reserved() { release(); }
};

class ProcessGroupFtcc : public FtccBase {
public:
	ProcessGroupFtcc(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
			 std::chrono::milliseconds timeout)
		: FtccBase(rank, size)
	{
		struct ft_config cfg;
		std::string token;
		int rc;
		Reserved reserved; /* reserve_port's, let go once ft_init returns */
		bool from_torch_store = false;

		if (env("FTCC_RANK").empty() && env("FTCC_RENDEZVOUS").empty() &&
		    env("FTCC_MEMBERSHIP").empty() && env("FTCC_BOOTSTRAP").empty()) {
			from_torch_store = true;
			/* not ftcc-run's: PyTorch's rank and size, the store's peers */
			Overrides o;
			o.set("FTCC_RANK", std::to_string(rank));
			o.set("FTCC_WORLD_SIZE", std::to_string(size));
			from_store(store, rank, size, timeout, &o, &token, &reserved.fd);
			config(&cfg, rank, size);
		} else {
			config(&cfg, rank, size);
		}
		if (cfg.token[0] == '\0' && !token.empty())
			put(cfg.token, sizeof(cfg.token), token, "token");
		std::fill(token.begin(), token.end(), '\0');
		if (timeout.count() > 0) {
			long ms = (long)timeout.count();
			cfg.op_timeout_ms = ms > 0x7fffffff ? 0x7fffffff : (int)ms;
			if (cfg.connect_timeout_ms > cfg.op_timeout_ms)
				cfg.connect_timeout_ms = cfg.op_timeout_ms;
		}
		reserved.hand_over();
		/* every ft_* call on the worker, ft_init's too: io_uring's logs are
		 * bound to the thread that made them (lib/durable/aio.c) */
		worker_ = std::thread([this] { loop(); });
		rc = 0;
		try {
			run_now([this, &cfg, &rc]() {
				rc = ft_init(&cfg, &comm_);
				if (rc == 0) {
					bool q = ft_rejoined(comm_, nullptr) == 1;
					std::lock_guard<std::mutex> g(mu_);
					quiet_ = q;
				}
				if (rc == 0)
					snapshot(nullptr);
			});
		} catch (...) {
			std::memset(cfg.token, 0, sizeof(cfg.token));
			shutdown();
			throw;
		}
		reserved.release();
		std::memset(cfg.token, 0, sizeof(cfg.token));
		if (rc != 0) {
			shutdown();
			fail("ft_init", rc);
		}
		if (from_torch_store && rank == 0)
			forget_keys(store, size);
	}

	~ProcessGroupFtcc() override
	{
		if (PyGILState_Check()) {
			/* the worker may need the GIL for a future's callback */
			py::gil_scoped_release nogil;
			shutdown();
		} else {
			shutdown();
		}
	}

	const std::string getBackendName() const override
	{
		return "ftcc";
	}

	c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
						const c10d::AllreduceOptions &opts) override
	{
		check_one(tensors, "all_reduce");
		at::Tensor t = tensors[0];
		enum ft_op op = op_of(opts.reduceOp);
		return enqueue(c10d::OpType::ALLREDUCE, {t}, [this, t, op]() {
			through_contiguous(t, [&](at::Tensor &b) {
				struct ft_op_info info;
				int rc = ft_allreduce(comm_, FT_IN_PLACE, b.data_ptr(),
						      (size_t)b.numel(), dtype_of(b), op, &info);
				finish_op("all_reduce", rc, &info);
			});
		});
	}

	c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
						const c10d::BroadcastOptions &opts) override
	{
		check_one(tensors, "broadcast");
		at::Tensor t = tensors[0];
		int root = (int)opts.rootRank;
		if (root < 0 || root >= getSize())
			throw std::invalid_argument("ftcc: broadcast root out of range");
		return enqueue(c10d::OpType::BROADCAST, {t}, [this, t, root]() {
			through_contiguous(t, [&](at::Tensor &b) {
				struct ft_op_info info;
				int dense = dense_rank(root);
				int rc = dense < 0 ? -FT_EROOTFAILED
						   : ft_broadcast(comm_, b.data_ptr(), b.nbytes(),
								  dense, &info);
				finish_op("broadcast", rc, dense < 0 ? nullptr : &info);
			});
		});
	}

	c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
						std::vector<at::Tensor> &inputs,
						const c10d::AllgatherOptions &) override
	{
		check_one(inputs, "all_gather");
		at::Tensor in = inputs[0];
		std::vector<at::Tensor> outs = one_list(outputs, in, "all_gather", "output");
		return enqueue(c10d::OpType::ALLGATHER, outs, [this, in, outs]() {
			int n = blocks_for(outs.size(), "all_gather", "outputs");
			at::Tensor flat = at::empty({(int64_t)n * in.numel()}, in.options());
			gather(flat, in, "all_gather");
			for (int i = 0; i < n; i++)
				outs[i].copy_(block(flat, i, in.numel()).view(outs[i].sizes()));
		}, [in, outs]() {
			for (auto &o : outs)
				o.copy_(in.view(o.sizes()));
		});
	}

	c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
						      const c10d::AllgatherOptions &) override
	{
		same_dtype(output, input, "all_gather_into_tensor");
		at::Tensor out = output, in = input;
		return enqueue(c10d::OpType::_ALLGATHER_BASE, {out}, [this, out, in]() {
			gather(out, in, "all_gather_into_tensor");
		}, [out, in]() {
			int64_t n = in.numel() > 0 ? out.numel() / in.numel() : 0;
			for (int64_t i = 0; i < n; i++)
				block(out.view({-1}), i, in.numel()).copy_(in.reshape({-1}));
		});
	}

	c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
						     std::vector<std::vector<at::Tensor>> &inputs,
						     const c10d::ReduceScatterOptions &opts) override
	{
		check_one(outputs, "reduce_scatter");
		at::Tensor out = outputs[0];
		std::vector<at::Tensor> ins = one_list(inputs, out, "reduce_scatter", "input");
		enum ft_op op = op_of(opts.reduceOp);
		return enqueue(c10d::OpType::REDUCE_SCATTER, {out}, [this, out, ins, op]() {
			int n = blocks_for(ins.size(), "reduce_scatter", "inputs");
			at::Tensor flat = at::empty({(int64_t)n * out.numel()}, out.options());
			for (int i = 0; i < n; i++)
				block(flat, i, out.numel()).copy_(ins[i].reshape({-1}));
			scatter(out, flat, op, "reduce_scatter");
		});
	}

	c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
							   const c10d::ReduceScatterOptions &opts)
		override
	{
		same_dtype(output, input, "reduce_scatter_tensor");
		enum ft_op op = op_of(opts.reduceOp);
		at::Tensor out = output, in = input;
		return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {out}, [this, out, in, op]() {
			scatter(out, in, op, "reduce_scatter_tensor");
		});
	}

	c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override
	{
		return enqueue(c10d::OpType::BARRIER, {}, [this]() {
			int rc = ft_barrier(comm_);
			finish_op("barrier", rc, nullptr);
		});
	}

	/* 1 and the next op's number when this process rejoined a running job
	 * (ftcc.h ft_rejoined), else 0. */
	std::pair<bool, uint64_t> rejoined()
	{
		std::pair<bool, uint64_t> r{false, 0};
		run_now([this, &r]() {
			uint64_t next = 0;
			r.first = ft_rejoined(comm_, &next) == 1;
			r.second = next;
		});
		return r;
	}

	/* ft_state_register of a contiguous CPU tensor's bytes, replicated:
	 * the tensor must live as long as the group. Returns the region's index. */
	int register_state(const at::Tensor &t)
	{
		check_cpu(t);
		if (!t.is_contiguous())
			throw std::invalid_argument("ftcc: register_state takes contiguous tensors");
		int idx = -1;
		at::Tensor keep = t;
		run_now([this, &idx, keep]() {
			int rc = ft_state_register(comm_, keep.data_ptr(), keep.nbytes(),
						   FT_STATE_REPLICATED);
			if (rc < 0)
				fail("register_state", rc);
			idx = rc;
		});
		kept_.push_back(keep);
		return idx;
	}

	/* Ends a newcomer's quiet start (its collectives so far stood in by
	 * its own values) and takes the registered state from a survivor
	 * (ft_state_sync); elsewhere returns at once. How many ops were quiet. */
	int resume()
	{
		int quiet;
		{
			std::lock_guard<std::mutex> g(mu_);
			quiet = quiet_ops_;
		}
		run_now([this]() {
			std::lock_guard<std::mutex> g(mu_);
			quiet_ = false;
		});
		run_now([this]() {
			int rc = ft_state_sync(comm_);
			if (rc != 0)
				fail("state_sync", rc);
		});
		return quiet;
	}

	/* What the last op that completed did, and the membership after it. */
	FtccOpInfo last_op()
	{
		std::lock_guard<std::mutex> g(info_mu_);
		return last_;
	}

	/* Ends the communicator now (ops queued before run first); later ops fail. */
	void shutdown()
	{
		{
			std::lock_guard<std::mutex> g(mu_);
			if (stopping_)
				return;
			stopping_ = true;
			/* the last job, on the worker as every ft_* call (io_uring) */
			auto work = c10::make_intrusive<FtccWork>(c10d::OpType::UNKNOWN,
								  std::vector<at::Tensor>{});
			queue_.push_back(Job{[this]() {
						     if (comm_ != nullptr)
							     ft_finalize(comm_);
						     comm_ = nullptr;
					     },
					     work});
		}
		cv_.notify_all();
		if (worker_.joinable())
			worker_.join();
	}

private:
	struct Job {
		std::function<void()> run;
		c10::intrusive_ptr<FtccWork> work;
	};

	/* Runs fn on the worker after what is queued, and waits (throws its error). */
	void run_now(std::function<void()> fn)
	{
		c10::intrusive_ptr<FtccWork> work = c10::make_intrusive<FtccWork>(
			c10d::OpType::UNKNOWN, std::vector<at::Tensor>{});
		{
			std::lock_guard<std::mutex> g(mu_);
			if (stopping_)
				throw std::runtime_error("ftcc: the process group was shut down");
			queue_.push_back(Job{std::move(fn), work});
		}
		cv_.notify_one();
		py::gil_scoped_release nogil;
		work->wait();
	}

	/* fn on t's data, through a contiguous copy when t is not contiguous. */
	template <class F> static void through_contiguous(const at::Tensor &t, F fn)
	{
		at::Tensor b = t.contiguous();
		fn(b);
		if (!b.is_same(t))
			t.copy_(b);
	}

	/* Block i of n elements of a flat tensor. */
	static at::Tensor block(const at::Tensor &flat, int64_t i, int64_t n)
	{
		return flat.narrow(0, i * n, n);
	}

	/* Worker: the members now, which a list of `got` tensors must match. */
	int blocks_for(size_t got, const char *what, const char *kind)
	{
		int n = members_now();
		if ((int)got != n)
			throw std::invalid_argument(std::string("ftcc: ") + what + ": " +
						    std::to_string(got) + " " + kind + " for " +
						    std::to_string(n) + " members");
		return n;
	}

	/* Worker: ft_allgather of in into out (the members' blocks, in order). */
	void gather(const at::Tensor &out, const at::Tensor &in, const char *what)
	{
		int n = members_now();
		if (out.numel() != (int64_t)n * in.numel())
			throw std::invalid_argument(std::string("ftcc: ") + what + ": the output holds " +
						    std::to_string(out.numel()) + " elements, " +
						    std::to_string(n) + " members send " +
						    std::to_string(in.numel()) + " each");
		at::Tensor i = in.contiguous();
		through_contiguous(out, [&](at::Tensor &o) {
			struct ft_op_info info;
			int rc = ft_allgather(comm_, i.data_ptr(), o.data_ptr(), (size_t)i.numel(),
					      dtype_of(i), &info);
			finish_op(what, rc, &info);
		});
	}

	/* Worker: ft_reduce_scatter of in (the members' blocks, in order) into out. */
	void scatter(const at::Tensor &out, const at::Tensor &in, enum ft_op op, const char *what)
	{
		int n = members_now();
		if (in.numel() != (int64_t)n * out.numel())
			throw std::invalid_argument(std::string("ftcc: ") + what + ": the input holds " +
						    std::to_string(in.numel()) + " elements, not " +
						    std::to_string(n) + " blocks of " +
						    std::to_string(out.numel()));
		at::Tensor i = in.contiguous();
		through_contiguous(out, [&](at::Tensor &o) {
			struct ft_op_info info;
			int rc = ft_reduce_scatter(comm_, i.data_ptr(), o.data_ptr(),
						   (size_t)o.numel(), dtype_of(o), op, &info);
			finish_op(what, rc, &info);
		});
	}

	static void same_dtype(const at::Tensor &out, const at::Tensor &in, const char *what)
	{
		check_cpu(out);
		check_cpu(in);
		if (out.scalar_type() != in.scalar_type())
			throw std::invalid_argument(std::string("ftcc: ") + what + ": dtypes differ");
		(void)dtype_of(in);
	}

	static void same_shape(const at::Tensor &a, const at::Tensor &b, const char *what)
	{
		check_cpu(a);
		if (a.scalar_type() != b.scalar_type() || a.numel() != b.numel())
			throw std::invalid_argument(std::string("ftcc: ") + what +
						    ": tensors of different dtypes or sizes");
	}

	/* The one list of a list-of-lists argument (which: "input" or
	 * "output"), each of its tensors of like's dtype and size. */
	static std::vector<at::Tensor> one_list(const std::vector<std::vector<at::Tensor>> &lists,
						const at::Tensor &like, const char *what,
						const char *which)
	{
		if (lists.size() != 1)
			throw std::invalid_argument(std::string("ftcc: ") + what + " takes one " +
						    which + " list");
		for (auto &t : lists[0])
			same_shape(t, like, what);
		return lists[0];
	}

	/* FTCC_* variables set for ft_config_from_env only (config.c reads the
	 * environment), put back as they were when this goes: a later group of
	 * this process must not take them for a launcher's. */
	struct Overrides {
		std::vector<std::pair<std::string, std::string>> saved;
		std::vector<std::string> unset;
		void set(const char *name, const std::string &value)
		{
			const char *old = std::getenv(name);
			if (old != nullptr)
				saved.emplace_back(name, old);
			else
				unset.emplace_back(name);
			setenv(name, value.c_str(), 1);
		}
		~Overrides()
		{
			for (auto &kv : saved)
				setenv(kv.first.c_str(), kv.second.c_str(), 1);
			for (auto &n : unset)
				unsetenv(n.c_str());
		}
	};

	static void config(struct ft_config *cfg, int rank, int size)
	{
		char err[512];
		int rc = ft_config_from_env(cfg, err, sizeof(err));

		if (rc != 0)
			throw std::runtime_error(std::string("ftcc: ") + err);
		if (cfg->rank != rank || cfg->world_size != size)
			throw std::runtime_error("ftcc: the environment says rank " +
						 std::to_string(cfg->rank) + " of " +
						 std::to_string(cfg->world_size) + ", PyTorch " +
						 std::to_string(rank) + " of " + std::to_string(size));
	}

	void from_store(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
			std::chrono::milliseconds timeout, Overrides *o, std::string *token,
			int *reserved)
	{
		py::gil_scoped_release nogil; /* store gets wait for the other ranks */
		/* a token handed to this store would be anyone's who reaches it */
		if (env("FTCC_TOKEN").empty() && env("FTCC_AUTH") != "none")
			throw std::runtime_error(
				"ftcc: torch.distributed's store is not authenticated (anyone who "
				"reaches it reads its keys), so ftcc puts no secret in it: give "
				"every rank the same FTCC_TOKEN (e.g. export "
				"FTCC_TOKEN=$(openssl rand -hex 16) before torchrun), or set "
				"FTCC_AUTH=none to run unauthenticated");
		if (rank == 0)
			store->set("ftcc/job", bytes_of("torch-" + hex_random(8)));
		std::string host = local_host();
		std::string mine = host + ":" + std::to_string(reserve_port(host, reserved));
		store->set("ftcc/peer/" + std::to_string(rank), bytes_of(mine));
		std::string peers;
		for (int r = 0; r < size; r++) {
			std::string key = "ftcc/peer/" + std::to_string(r);
			store->wait({key}, timeout);
			peers += (r ? "," : "") + string_of(store->get(key));
		}
		store->wait({"ftcc/job"}, timeout);
		if (env("FTCC_JOB_ID").empty())
			o->set("FTCC_JOB_ID", string_of(store->get("ftcc/job")));
		o->set("FTCC_MEMBERSHIP", "inband");
		o->set("FTCC_BOOTSTRAP", "peers");
		o->set("FTCC_PEERS", peers);
		(void)token;
	}

	/* Rank 0, once its ft_init returned (every rank read the keys, or it
	 * could not have linked to it): the keys go, so a store kept for the
	 * job's life says nothing of it to whoever reads it later. */
	static void forget_keys(const c10::intrusive_ptr<c10d::Store> &store, int size)
	{
		py::gil_scoped_release nogil;
		try {
			store->deleteKey("ftcc/job");
			for (int r = 0; r < size; r++)
				store->deleteKey("ftcc/peer/" + std::to_string(r));
		} catch (const std::exception &) {
			/* a store without deletes (an old FileStore): nothing secret in it */
		}
	}

	c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, std::vector<at::Tensor> outs,
					       std::function<void()> run,
					       std::function<void()> local = nullptr)
	{
		auto work = c10::make_intrusive<FtccWork>(type, std::move(outs));
		{
			std::lock_guard<std::mutex> g(mu_);
			if (stopping_)
				throw std::runtime_error("ftcc: the process group was shut down");
			if (quiet_) {
				/* a newcomer before resume(): its own values stand in (docs/pytorch.md) */
				quiet_ops_++;
				run = local != nullptr ? std::move(local) : [] {};
			}
			queue_.push_back(Job{std::move(run), work});
		}
		cv_.notify_one();
		return work;
	}

	void loop()
	{
		for (;;) {
			Job job;
			{
				std::unique_lock<std::mutex> g(mu_);
				cv_.wait(g, [this] { return stopping_ || !queue_.empty(); });
				if (queue_.empty())
					return;
				job = std::move(queue_.front());
				queue_.pop_front();
			}
			/* no lock of ours is held: the future's callbacks run here */
			std::exception_ptr err;
			try {
				job.run();
			} catch (...) {
				err = std::current_exception();
			}
			job.work->done(err);
		}
	}

	/* Worker thread only (ft_* calls on one thread: ftcc.h). */
	void finish_op(const char *what, int rc, const struct ft_op_info *info)
	{
		snapshot(rc == 0 ? info : nullptr);
		if (rc != 0)
			fail(what, rc);
	}

	void snapshot(const struct ft_op_info *info)
	{
		FtccOpInfo s;
		int n = ft_size(comm_);

		for (int i = 0; i < n; i++)
			s.members.push_back(ft_orig_rank(comm_, i));
		s.generation = ft_generation(comm_);
		if (info != nullptr) {
			s.op_seq = info->op_seq;
			s.generation = info->generation;
			s.contributors = info->contributors;
			s.failed = info->failed;
			s.recovery_ms = info->recovery_ms;
		}
		std::lock_guard<std::mutex> g(info_mu_);
		if (info == nullptr) {
			s.op_seq = last_.op_seq;
			s.contributors = last_.contributors;
		}
		last_ = s;
	}

	int members_now()
	{
		return ft_size(comm_);
	}

	int dense_rank(int orig)
	{
		int n = ft_size(comm_);
		for (int i = 0; i < n; i++)
			if (ft_orig_rank(comm_, i) == orig)
				return i;
		return -1;
	}

	struct ft_comm *comm_ = nullptr;
	std::thread worker_;
	std::mutex mu_;
	std::condition_variable cv_;
	std::deque<Job> queue_;
	bool stopping_ = false;
	bool quiet_ = false;    /* a newcomer before resume() */
	int quiet_ops_ = 0;
	std::vector<at::Tensor> kept_; /* registered state: alive as long as the group */
	std::mutex info_mu_;
	FtccOpInfo last_;
};

PYBIND11_MODULE(_C, m)
{
	py::module::import("torch.distributed");
	m.doc() = "ftcc's torch.distributed backend (import ftcc.torch to register it)";
	m.attr("TORCH_BASE") = FTCC_TORCH_BASE;
	m.attr("FTCC_EINVAL") = ft_err_name(-FT_EINVAL);

	py::class_<FtccOpInfo>(m, "OpInfo")
		.def_readonly("op_seq", &FtccOpInfo::op_seq)
		.def_readonly("generation", &FtccOpInfo::generation)
		.def_readonly("contributors", &FtccOpInfo::contributors)
		.def_readonly("failed", &FtccOpInfo::failed)
		.def_readonly("recovery_ms", &FtccOpInfo::recovery_ms)
		.def_readonly("members", &FtccOpInfo::members)
		.def("__repr__", [](const FtccOpInfo &i) {
			return "OpInfo(op_seq=" + std::to_string(i.op_seq) +
			       ", generation=" + std::to_string(i.generation) +
			       ", contributors=" + std::to_string(i.contributors) +
			       ", failed=" + std::to_string(i.failed) +
			       ", members=" + std::to_string(i.members.size()) + ")";
		});

	py::class_<ProcessGroupFtcc, c10::intrusive_ptr<ProcessGroupFtcc>, FtccBase>(
		m, "ProcessGroupFtcc")
		.def(py::init<const c10::intrusive_ptr<c10d::Store> &, int, int,
			      std::chrono::milliseconds>(),
		     py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"))
		.def("last_op", &ProcessGroupFtcc::last_op,
		     "What the last completed op did, and the membership after it")
		.def("rejoined", &ProcessGroupFtcc::rejoined,
		     "(True, next op) when this process rejoined a running job (rejoin policy)")
		.def("register_state", &ProcessGroupFtcc::register_state, py::arg("tensor"),
		     "ft_state_register: a contiguous CPU tensor, replicated, kept for the group")
		.def("resume", &ProcessGroupFtcc::resume,
		     "Ends a newcomer's quiet start and takes the state from a survivor")
		.def("shutdown", &ProcessGroupFtcc::shutdown,
		     py::call_guard<py::gil_scoped_release>(),
		     "Runs the ops already queued, then ends the communicator");
}
