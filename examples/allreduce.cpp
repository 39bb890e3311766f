// allreduce.cpp: the C API from C++: ft_init, an in-place allreduce checked against the expected sum, ft_finalize.
// SPDX-License-Identifier: MIT
// Build against an installed ftcc: g++ -o allreduce allreduce.cpp $(pkg-config --cflags --libs ftcc)
// Run: ftcc-run -n 2 ./allreduce
#include <ftcc.h>

#include <cstdio>
#include <vector>

int main()
{
	ft_comm *comm = nullptr;
	int rc = ft_init(nullptr, &comm);
	if (rc != 0) {
		std::fprintf(stderr, "ft_init: %s\n", ft_strerror(rc));
		return 1;
	}
	int rank = ft_rank(comm), size = ft_size(comm);
	if (rank < 0 || size < 0) {
		std::fprintf(stderr, "ft_rank/ft_size: %s\n", ft_strerror(rank < 0 ? rank : size));
		ft_finalize(comm);
		return 1;
	}
	// element i of rank r holds r + i: the sum over ranks is size * i + size * (size - 1) / 2
	std::vector<double> x(1000);
	for (size_t i = 0; i < x.size(); i++)
		x[i] = rank + static_cast<double>(i);
	rc = ft_allreduce(comm, FT_IN_PLACE, x.data(), x.size(), FT_FLOAT64, FT_SUM, nullptr);
	if (rc != 0) {
		std::fprintf(stderr, "ft_allreduce: %s\n", ft_strerror(rc));
		ft_finalize(comm);
		return 1;
	}
	int bad = 0;
	for (size_t i = 0; i < x.size(); i++)
		bad += x[i] != size * static_cast<double>(i) + size * (size - 1) / 2.0;
	rc = ft_finalize(comm);
	if (rc != 0) {
		std::fprintf(stderr, "ft_finalize: %s\n", ft_strerror(rc));
		return 1;
	}
	if (bad != 0) {
		std::fprintf(stderr, "rank %d: %d wrong elements\n", rank, bad);
		return 1;
	}
	std::printf("rank %d of %d: allreduce of %zu doubles correct\n", rank, size, x.size());
	return 0;
}
