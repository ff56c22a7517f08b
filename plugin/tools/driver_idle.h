/* lg_nccl_driver --idle-s S: every connection set up, registered and idle (nothing posted) for
 * up to S seconds before the timed traffic starts, so that a benchmark can measure what idle
 * connections cost (the plugin's threads, descriptors, memory, CPU). SIGUSR2 ends the idle
 * stretch early (a harness starts many processes' traffic together); SIGUSR1 too, and then the
 * timed run that follows as well. Two lines on stderr, t in CLOCK_MONOTONIC seconds like the
 * progress lines:
 *   lg_nccl_driver: connected t=T comms=N idle_s=S   (the idle stretch begins)
 *   lg_nccl_driver: traffic t=T                        (it ends; the stream starts)
 * Needs the main file's D and driver_stream.h (drv_stop_requested). */
#ifndef LG_DRIVER_IDLE_H
#define LG_DRIVER_IDLE_H

static volatile sig_atomic_t drv_idle_over;

static void drv_on_sigusr2(int sig)
{
    (void)sig;
    drv_idle_over = 1;
}

static void drv_idle_phase(double seconds)
{
    sigaction(SIGUSR2, &(struct sigaction){.sa_handler = drv_on_sigusr2, .sa_flags = SA_RESTART},
              NULL);
    double now = drv_now(), end = now + seconds;
    fprintf(stderr, "lg_nccl_driver: connected t=%.6f comms=%d idle_s=%.3f\n", now, D.ncomms,
            seconds);
    while ((now = drv_now()) < end && !drv_idle_over && !drv_stop_requested) {
        double left = end - now < 0.01 ? end - now : 0.01; /* a signal is seen within 10 ms */
        nanosleep(&(struct timespec){0, (long)(left * 1e9)}, NULL);
    }
    fprintf(stderr, "lg_nccl_driver: traffic t=%.6f\n", drv_now());
}

#endif
