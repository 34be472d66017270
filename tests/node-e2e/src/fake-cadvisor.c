/* Stand-in for the cAdvisor image (gcr.io/cadvisor/cadvisor:v0.47.2) that the kubelet's node
 * e2e Density specs run as a host-network pod, "cadvisor": their resource collector
 * (test/e2e_node/resource_collector.go) reads two things of it over HTTP on localhost:
 *   GET /api/v2.1/machine                      until it answers 200 (readiness);
 *   GET /api/v2.1/stats/NAME?count=1&type=name&recursive=false
 *       every 500 ms, for NAME the cgroup of the kubelet and of the container runtime (from
 *       /proc/PID/cgroup as the suite sees it), and decodes of the answer only
 *       {"/NAME": {"stats": [{"timestamp", "cpu": {"usage": {"total"}},
 *                             "memory": {"usage", "working_set", "rss"}}]}}.
 * This answers exactly that, as cAdvisor computes it (google/cadvisor
 * container/libcontainer/handler.go, setCPUStats and setMemoryStats), from the cgroup files:
 *   cgroup v1: cpu total = cpuacct.usage (ns); memory usage = memory.usage_in_bytes, rss =
 *              total_rss of memory.stat, working set = usage - total_inactive_file (0 if less);
 *   cgroup v2: cpu total = usage_usec of cpu.stat * 1000; usage = memory.current, rss = anon,
 *              working set = usage - inactive_file.
 * A container's sample is taken at most once per housekeeping interval (cAdvisor's
 * --housekeeping_interval, which the spec sets to 1s) and served with the time it was taken,
 * as cAdvisor's housekeeping does; the collector computes CPU from two samples' difference.
 *
 * The hierarchies are read under /sys/fs/cgroup (the pod mounts the node's /sys there) or else
 * /rootfs/sys/fs/cgroup (the node's / at /rootfs). NAME must be a cgroup path under the root
 * (no ".." component): a process outside the node's cgroup namespace has a "/../.." path in
 * the suite's /proc view, and is not the node's.
 *
 * It listens on 127.0.0.1 and ::1 only (the collector dials localhost; the pod has the host's
 * network, and the real cAdvisor's listener on every address would be the machine's).
 *
 * usage: cadvisor [-logtostderr] [--profiling] [--housekeeping_interval=1s] [--port=8080]
 *   (cAdvisor's flags the spec passes; others are ignored with a warning) */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_NAME 512
#define MAX_CACHED 64

struct sample {
  char name[MAX_NAME];
  int valid;
  struct timespec mono; /* when taken, for the housekeeping interval */
  struct timespec wall; /* when taken, served as its timestamp */
  uint64_t cpu_total, mem_usage, mem_working_set, mem_rss;
};

static struct sample cache[MAX_CACHED];
static double interval_s = 1.0;

static void down(int s) { (void)s; _exit(0); }

static int read_u64(const char *path, uint64_t *out) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  unsigned long long v;
  int ok = fscanf(f, "%llu", &v) == 1;
  fclose(f);
  if (!ok) return -1;
  *out = v;
  return 0;
}

/* The value of KEY in a "key value" per line file (memory.stat, cpu.stat). */
static int read_key(const char *path, const char *key, uint64_t *out) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char k[128];
  unsigned long long v;
  int found = -1;
  while (fscanf(f, "%127s %llu", k, &v) == 2) {
    if (strcmp(k, key) == 0) {
      *out = v;
      found = 0;
      break;
    }
  }
  fclose(f);
  return found;
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Takes a sample of cgroup NAME into S. 0, or -1 when no hierarchy has it. */
static int take(const char *name, struct sample *s) {
  static const char *bases[] = {"/sys/fs/cgroup", "/rootfs/sys/fs/cgroup"};
  char p[2200], q[2300];
  for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
    const char *b = bases[i];
    snprintf(p, sizeof(p), "%s/cgroup.controllers", b);
    if (access(p, F_OK) == 0) { /* cgroup v2 */
      snprintf(p, sizeof(p), "%s%s", b, name);
      if (!is_dir(p)) continue;
      uint64_t usec = 0, inactive = 0;
      snprintf(q, sizeof(q), "%s/cpu.stat", p);
      if (read_key(q, "usage_usec", &usec) < 0) continue;
      s->cpu_total = usec * 1000;
      snprintf(q, sizeof(q), "%s/memory.current", p);
      if (read_u64(q, &s->mem_usage) < 0) continue;
      snprintf(q, sizeof(q), "%s/memory.stat", p);
      s->mem_rss = 0;
      read_key(q, "anon", &s->mem_rss);
      read_key(q, "inactive_file", &inactive);
      s->mem_working_set = s->mem_usage > inactive ? s->mem_usage - inactive : 0;
      return 0;
    }
    /* cgroup v1: cpuacct alone or co-mounted with cpu */
    const char *cpu_dirs[] = {"cpuacct", "cpu,cpuacct", "cpuacct,cpu"};
    int got_cpu = 0;
    for (size_t j = 0; j < 3 && !got_cpu; j++) {
      snprintf(q, sizeof(q), "%s/%s%s/cpuacct.usage", b, cpu_dirs[j], name);
      got_cpu = read_u64(q, &s->cpu_total) == 0;
    }
    if (!got_cpu) continue;
    snprintf(q, sizeof(q), "%s/memory%s/memory.usage_in_bytes", b, name);
    if (read_u64(q, &s->mem_usage) < 0) continue;
    snprintf(q, sizeof(q), "%s/memory%s/memory.stat", b, name);
    uint64_t inactive = 0;
    s->mem_rss = 0;
    read_key(q, "total_rss", &s->mem_rss);
    read_key(q, "total_inactive_file", &inactive);
    s->mem_working_set = s->mem_usage > inactive ? s->mem_usage - inactive : 0;
    return 0;
  }
  return -1;
}

static double since(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

/* The sample of NAME no older than the housekeeping interval, or NULL. */
static struct sample *sample_of(const char *name) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  struct sample *slot = NULL;
  for (int i = 0; i < MAX_CACHED && !slot; i++)
    if (cache[i].valid && strcmp(cache[i].name, name) == 0) slot = &cache[i];
  if (slot && since(&slot->mono, &now) < interval_s) return slot;
  if (!slot) /* a free slot, else the least recently sampled */
    for (int i = 0; i < MAX_CACHED; i++)
      if (!slot || !cache[i].valid || (slot->valid && since(&cache[i].mono, &slot->mono) > 0)) {
        slot = &cache[i];
        if (!slot->valid) break;
      }
  struct sample s = {0};
  snprintf(s.name, sizeof(s.name), "%s", name);
  if (take(name, &s) < 0) return NULL;
  s.valid = 1;
  s.mono = now;
  clock_gettime(CLOCK_REALTIME, &s.wall);
  *slot = s;
  return slot;
}

static int valid_name(const char *n) {
  if (n[0] != '/' || strlen(n) >= MAX_NAME) return 0;
  if (strstr(n, "/../") || strstr(n, "/./") || strstr(n, "//")) return 0;
  size_t l = strlen(n);
  if ((l >= 3 && strcmp(n + l - 3, "/..") == 0) || (l >= 2 && strcmp(n + l - 2, "/.") == 0)) return 0;
  for (const char *p = n; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          strchr("/._-:@", *p)))
      return 0;
  return 1;
}

static void reply(int c, int code, const char *type, const char *body) {
  char hdr[256];
  const char *reason = code == 200 ? "OK" : code == 404 ? "Not Found" : "Bad Request";
  int hl = snprintf(hdr, sizeof(hdr),
                    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                    "Connection: close\r\n\r\n",
                    code, reason, type, strlen(body));
  if (write(c, hdr, (size_t)hl) < 0) return;
  if (write(c, body, strlen(body)) < 0) return;
}

static void serve(int c) {
  struct timeval tv = {.tv_sec = 5};
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[8192];
  size_t got = 0;
  buf[0] = 0;
  while (got < sizeof(buf) - 1) {
    ssize_t r = read(c, buf + got, sizeof(buf) - 1 - got);
    if (r <= 0) break;
    got += (size_t)r;
    buf[got] = 0;
    if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n")) break;
  }
  char method[16], target[2048];
  if (sscanf(buf, "%15s %2047s", method, target) != 2 || strcmp(method, "GET") != 0) {
    reply(c, 400, "text/plain", "GET only\n");
    return;
  }
  char *query = strchr(target, '?');
  if (query) *query = 0;
  static const char stats[] = "/api/v2.1/stats";
  char body[4096];
  if (strcmp(target, "/api/v2.1/machine") == 0) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned long long mem = (unsigned long long)sysconf(_SC_PHYS_PAGES) * (unsigned long long)sysconf(_SC_PAGESIZE);
    snprintf(body, sizeof(body), "{\"num_cores\":%ld,\"memory_capacity\":%llu}\n", cores, mem);
    reply(c, 200, "application/json", body);
  } else if (strcmp(target, "/healthz") == 0) {
    reply(c, 200, "text/plain", "ok");
  } else if (strncmp(target, stats, sizeof(stats) - 1) == 0) {
    const char *name = target + sizeof(stats) - 1;
    if (*name == 0) name = "/";
    if (!valid_name(name)) {
      snprintf(body, sizeof(body), "invalid container name %.600s\n", name);
      reply(c, 404, "text/plain", body);
      return;
    }
    struct sample *s = sample_of(name);
    if (!s) {
      snprintf(body, sizeof(body), "unknown container \"%s\"\n", name);
      reply(c, 404, "text/plain", body);
      return;
    }
    struct tm tm;
    gmtime_r(&s->wall.tv_sec, &tm);
    char ts[64];
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(body, sizeof(body),
             "{\"%s\":{\"spec\":{\"has_cpu\":true,\"has_memory\":true},\"stats\":[{"
             "\"timestamp\":\"%s.%09ldZ\",\"has_cpu\":true,\"has_memory\":true,"
             "\"cpu\":{\"usage\":{\"total\":%llu}},"
             "\"memory\":{\"usage\":%llu,\"working_set\":%llu,\"rss\":%llu}}]}}\n",
             s->name, ts, s->wall.tv_nsec, (unsigned long long)s->cpu_total,
             (unsigned long long)s->mem_usage, (unsigned long long)s->mem_working_set,
             (unsigned long long)s->mem_rss);
    reply(c, 200, "application/json", body);
  } else {
    reply(c, 404, "text/plain", "not found\n");
  }
}

static int listen_on(int family, int port) {
  int fd = socket(family, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int r;
  if (family == AF_INET) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    r = bind(fd, (struct sockaddr *)&a, sizeof(a));
  } else {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons(port),
                             .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    r = bind(fd, (struct sockaddr *)&a, sizeof(a));
  }
  if (r < 0 || listen(fd, 128) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int main(int argc, char **argv) {
  int port = 8080; /* cAdvisor's default */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    while (*a == '-') a++;
    if (strncmp(a, "port=", 5) == 0) {
      port = atoi(a + 5);
    } else if (strncmp(a, "housekeeping_interval=", 22) == 0) {
      char *end;
      double v = strtod(a + 22, &end);
      if (strcmp(end, "ms") == 0) v /= 1000;
      else if (strcmp(end, "m") == 0) v *= 60;
      if (v > 0) interval_s = v;
    } else if (strcmp(a, "logtostderr") != 0 && strcmp(a, "profiling") != 0) {
      fprintf(stderr, "cadvisor stand-in: flag %s ignored\n", argv[i]);
    }
  }
  if (port <= 0 || port > 65535) {
    fprintf(stderr, "cadvisor stand-in: bad port\n");
    return 2;
  }
  struct sigaction sd = {.sa_handler = down};
  sigaction(SIGTERM, &sd, NULL);
  sigaction(SIGINT, &sd, NULL);
  signal(SIGPIPE, SIG_IGN);

  struct pollfd fds[2];
  int n = 0;
  int fd4 = listen_on(AF_INET, port), fd6 = listen_on(AF_INET6, port);
  if (fd4 >= 0) fds[n++] = (struct pollfd){.fd = fd4, .events = POLLIN};
  if (fd6 >= 0) fds[n++] = (struct pollfd){.fd = fd6, .events = POLLIN};
  if (fd4 < 0) {
    fprintf(stderr, "cadvisor stand-in: cannot listen on 127.0.0.1:%d: %s\n", port, strerror(errno));
    return 1;
  }
  fprintf(stderr, "cadvisor stand-in (peapod node e2e): listening on 127.0.0.1:%d%s, housekeeping %.3fs\n",
          port, fd6 >= 0 ? " and [::1]" : "", interval_s);
  for (;;) {
    if (poll(fds, (nfds_t)n, -1) < 0) {
      if (errno == EINTR) continue;
      perror("poll");
      return 1;
    }
    for (int i = 0; i < n; i++) {
      if (!(fds[i].revents & POLLIN)) continue;
      int c = accept(fds[i].fd, NULL, NULL);
      if (c < 0) continue;
      serve(c);
      close(c);
    }
  }
}
