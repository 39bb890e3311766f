/* dl.c: libfabric loaded when a fabric transport is first opened (fabric.h says why), and the functions it exports. */
/* SPDX-License-Identifier: MIT */
#include <dlfcn.h>
#include <stdio.h>

#include "fabric.h"

#define FABRIC_SONAME "libfabric.so.1"

static struct {
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
		       struct fi_info **);
	void (*freeinfo)(struct fi_info *);
	struct fi_info *(*dupinfo)(const struct fi_info *);
	int (*fabric)(struct fi_fabric_attr *, struct fid_fabric **, void *);
	const char *(*strerror)(int);
	uint32_t (*version)(void);
} fab;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[320];

/* dlsym into *slot; false (and load_error says which) when it is missing. */
static bool resolve(void *h, const char *name, void **slot)
{
	*slot = dlsym(h, name);
	if (*slot == NULL)
		snprintf(load_error, sizeof(load_error), "%s has no %s", FABRIC_SONAME, name);
	return *slot != NULL;
}

static void load(void)
{
	void *h = dlopen(FABRIC_SONAME, RTLD_NOW | RTLD_LOCAL);
	void *p[6];

	if (h == NULL) {
		const char *why = dlerror();
		snprintf(load_error, sizeof(load_error), "cannot load %s: %s", FABRIC_SONAME,
			 why != NULL ? why : "unknown error");
		return;
	}
	if (!resolve(h, "fi_getinfo", &p[0]) || !resolve(h, "fi_freeinfo", &p[1]) ||
	    !resolve(h, "fi_dupinfo", &p[2]) || !resolve(h, "fi_fabric", &p[3]) ||
	    !resolve(h, "fi_strerror", &p[4]) || !resolve(h, "fi_version", &p[5])) {
		dlclose(h);
		return;
	}
	/* function pointers from dlsym's void * (POSIX guarantees the round trip) */
	*(void **)&fab.freeinfo = p[1];
	*(void **)&fab.dupinfo = p[2];
	*(void **)&fab.fabric = p[3];
	*(void **)&fab.strerror = p[4];
	*(void **)&fab.version = p[5];
	*(void **)&fab.getinfo = p[0]; /* last: it says the table is whole */
	/* never closed: providers keep threads and handlers of their own */
}

static bool loaded(void)
{
	pthread_once(&load_once, load);
	return fab.getinfo != NULL;
}

/* 0, or -FT_ENOSYS (logged) when libfabric cannot be loaded. */
int ft__fab_load(void)
{
	if (!loaded()) {
		ft__error("fabric: %s", load_error);
		return -FT_ENOSYS;
	}
	return 0;
}

int ft__fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		   const struct fi_info *hints, struct fi_info **info)
{
	if (ft__fab_load() != 0)
		return -FI_ENOSYS;
	return fab.getinfo(version, node, service, flags, hints, info);
}

void ft__fi_freeinfo(struct fi_info *info)
{
	if (info != NULL && loaded())
		fab.freeinfo(info);
}

struct fi_info *ft__fi_dupinfo(const struct fi_info *info)
{
	return ft__fab_load() == 0 ? fab.dupinfo(info) : NULL;
}

int ft__fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
	if (ft__fab_load() != 0)
		return -FI_ENOSYS;
	return fab.fabric(attr, fabric, context);
}

const char *ft__fi_strerror(int errnum)
{
	return loaded() ? fab.strerror(errnum) : "libfabric is not loaded";
}

uint32_t ft__fi_version(void)
{
	return ft__fab_load() == 0 ? fab.version() : 0;
}
