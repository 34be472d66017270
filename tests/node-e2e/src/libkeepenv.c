/* What busybox's ash does since 1.36 and Debian's busybox 1.35 does not: pass environment
 * variables whose names are no shell names (ConfigMap's and Secret's envFrom make "data-1")
 * on to the programs it runs. The node conformance suite's "should be consumable via the
 * environment" specs run `sh -c env` in upstream's busybox 1.37 image and look for them.
 *
 * Preloaded into every dynamic program of the suite's images (/etc/ld.so.preload). In a busybox
 * shell (argv[0] "sh" or "ash", or "busybox sh"), it keeps the initial environment's entries
 * with such names and adds them back to the environment of each program the shell executes,
 * unless that environment has the name already. Elsewhere it does nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char **kept;
static size_t nkept;

static int shell_name(const char *n) {
  if (n == NULL) return 0;
  const char *base = strrchr(n, '/');
  base = base ? base + 1 : n;
  if (*base == '-') base++; /* a login shell */
  return strcmp(base, "sh") == 0 || strcmp(base, "ash") == 0;
}

/* A name the shell accepts: [A-Za-z_][A-Za-z0-9_]*, up to the '='. */
static int valid_name(const char *e) {
  if (!(*e == '_' || (*e >= 'A' && *e <= 'Z') || (*e >= 'a' && *e <= 'z'))) return 0;
  for (e++; *e && *e != '='; e++)
    if (!(*e == '_' || (*e >= 'A' && *e <= 'Z') || (*e >= 'a' && *e <= 'z') ||
          (*e >= '0' && *e <= '9')))
      return 0;
  return 1;
}

/* glibc passes argc, argv and envp to the initialisers of shared objects. */
__attribute__((constructor)) static void keep(int argc, char **argv, char **envp) {
  if (argc < 1 || !(shell_name(argv[0]) || (argc > 1 && strstr(argv[0], "busybox") &&
                                              shell_name(argv[1]))))
    return;
  size_t n = 0;
  for (char **e = envp; e && *e; e++)
    if (strchr(*e, '=') && !valid_name(*e)) n++;
  if (n == 0) return;
  kept = calloc(n, sizeof(char *));
  if (kept == NULL) return;
  for (char **e = envp; *e; e++)
    if (strchr(*e, '=') && !valid_name(*e)) kept[nkept++] = *e;
}

static int has_name(char *const *envp, const char *entry) {
  size_t len = strchr(entry, '=') - entry + 1;
  for (; envp && *envp; envp++)
    if (strncmp(*envp, entry, len) == 0) return 1;
  return 0;
}

int execve(const char *path, char *const argv[], char *const envp[]) {
  static int (*real)(const char *, char *const[], char *const[]);
  if (real == NULL) real = dlsym(RTLD_NEXT, "execve");
  if (real == NULL) return -1;
  if (nkept == 0) return real(path, argv, envp);
  size_t n = 0;
  while (envp && envp[n]) n++;
  char **env = calloc(n + nkept + 1, sizeof(char *));
  if (env == NULL) return real(path, argv, envp);
  size_t m = 0;
  for (size_t i = 0; i < n; i++) env[m++] = envp[i];
  for (size_t i = 0; i < nkept; i++)
    if (!has_name(envp, kept[i])) env[m++] = kept[i];
  env[m] = NULL;
  int rc = real(path, argv, env);
  free(env); /* only reached when exec failed */
  return rc;
}
