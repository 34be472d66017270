/* Tiny static stand-in for the nginx/httpd test images used by critest
 * (installed as /usr/sbin/nginx and /usr/local/apache2/bin/httpd):
 *  - re-execs itself so /proc/self/cmdline reads "nginx: master process ..."
 *    while comm stays "nginx" (pidof nginx works),
 *  - writes its pid to /var/run/nginx.pid,
 *  - answers every HTTP request on $NGINX_PORT (default 80) with 200 OK,
 *  - exits on SIGTERM/SIGINT/SIGQUIT (it usually runs as PID 1). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static const char body[] =
    "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>\n"
    "<body><h1>Welcome to nginx!</h1></body></html>\n";

static void down(int s) { (void)s; _exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, NULL, WNOHANG) > 0) ; }

int main(int argc, char **argv) {
  (void)argc;
  char self[PATH_MAX] = "server";
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) self[n] = 0;
  const char *prog = strrchr(self, '/') ? strrchr(self, '/') + 1 : self;
  int is_nginx = strcmp(prog, "nginx") == 0;
  if (is_nginx && !strstr(argv[0], "master process") && n > 0) {
    char *nargv[] = {"nginx: master process nginx -g daemon off;", NULL};
    execv(self, nargv);
    perror("execv");
  }
  struct sigaction sd = {.sa_handler = down};
  sigaction(SIGTERM, &sd, NULL);
  sigaction(SIGINT, &sd, NULL);
  sigaction(SIGQUIT, &sd, NULL);
  struct sigaction sr = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigaction(SIGCHLD, &sr, NULL);
  signal(SIGPIPE, SIG_IGN);

  int port = 80;
  const char *p = getenv("NGINX_PORT");
  if (p && atoi(p) > 0) port = atoi(p);

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) { perror("socket"); return 1; }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                          .sin_addr.s_addr = htonl(INADDR_ANY)};
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) { perror("bind"); return 1; }
  if (listen(fd, 128) < 0) { perror("listen"); return 1; }

  if (is_nginx) {
    FILE *pf = fopen("/var/run/nginx.pid", "w");
    if (pf) { fprintf(pf, "%d\n", (int)getpid()); fclose(pf); }
  }
  fprintf(stderr, "%s: peapod critest stand-in %s listening on :%d\n", prog, prog, port);

  for (;;) {
    int c = accept(fd, NULL, NULL);
    if (c < 0) { if (errno == EINTR) continue; perror("accept"); continue; }
    struct timeval tv = {.tv_sec = 5};
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[8192]; size_t got = 0;
    while (got < sizeof(buf) - 1) {
      ssize_t r = read(c, buf + got, sizeof(buf) - 1 - got);
      if (r <= 0) break;
      got += (size_t)r; buf[got] = 0;
      if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n")) break;
    }
    char hdr[256];
    int hl = snprintf(hdr, sizeof(hdr),
                      "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                      "Content-Length: %zu\r\nConnection: close\r\n\r\n", sizeof(body) - 1);
    if (write(c, hdr, (size_t)hl) > 0 && strncmp(buf, "HEAD", 4) != 0)
      (void)!write(c, body, sizeof(body) - 1);
    close(c);
  }
}
