/* Stand-in for busybox's nmeter applet, which upstream's busybox image has and Debian's
 * busybox packages lack. The node conformance suite's init-container specs stamp their logs
 * with `date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z`: only the time directive is needed.
 *
 * usage: nmeter [-d MSEC] FORMAT
 *   Prints FORMAT every MSEC milliseconds (default 1000; 0: without pause) until its output
 *   is closed. In FORMAT, %[N]t is the time of day HH:MM:SS with N decimals (0-6), %% is %,
 *   other directives print nothing; anything else is printed as it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static void line(const char *fmt) {
  struct timeval tv;
  struct tm tm;
  gettimeofday(&tv, NULL);
  localtime_r(&tv.tv_sec, &tm);
  for (const char *p = fmt; *p; p++) {
    if (*p != '%') {
      putchar(*p);
      continue;
    }
    p++;
    int decimals = 0;
    while (*p >= '0' && *p <= '9') decimals = decimals * 10 + (*p++ - '0');
    if (*p == '\0') break;
    if (*p == '%') {
      putchar('%');
    } else if (*p == 't') {
      printf("%02d:%02d:%02d", tm.tm_hour, tm.tm_min, tm.tm_sec);
      if (decimals > 6) decimals = 6;
      if (decimals > 0) {
        long frac = tv.tv_usec;
        for (int i = decimals; i < 6; i++) frac /= 10;
        printf(".%0*ld", decimals, frac);
      }
    }
  }
  putchar('\n');
  if (fflush(stdout) != 0) exit(1);
}

int main(int argc, char **argv) {
  long delay = 1000;
  int opt;
  while ((opt = getopt(argc, argv, "d:")) != -1) {
    if (opt == 'd') delay = atol(optarg);
    else {
      fprintf(stderr, "usage: nmeter [-d MSEC] FORMAT\n");
      return 2;
    }
  }
  if (optind >= argc) {
    fprintf(stderr, "usage: nmeter [-d MSEC] FORMAT\n");
    return 2;
  }
  for (;;) {
    line(argv[optind]);
    if (delay > 0) usleep((useconds_t)delay * 1000);
  }
}
