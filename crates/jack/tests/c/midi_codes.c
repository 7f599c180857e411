/* The jack_midi_* answers to bad writes, for comparison between quaver's libjack and
 * jackd2's: every cycle the process callback writes a note on at frame 10, then an
 * event before it (out of order), one at frame nframes (out of the cycle), one a byte
 * larger than jack_midi_max_event_size, and a note off at frame 20. The answers of the
 * first cycle are printed as one line; then the client runs on for argv[1] seconds so
 * the events can be watched from another client. */
#include <jack/jack.h>
#include <jack/midiport.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static jack_port_t *out;
static volatile int done = 0;
static int r_on, r_order, r_late, r_big, r_off;
static unsigned lost_after_big, count;
static int max_ok;
static unsigned char big[1 << 17];

static int process(jack_nframes_t n, void *arg) {
    (void)arg;
    void *b = jack_port_get_buffer(out, n);
    jack_midi_clear_buffer(b);
    unsigned char on[3] = {0x90, 60, 100}, off[3] = {0x80, 60, 0};
    int a = jack_midi_event_write(b, 10, on, 3);
    int o = jack_midi_event_write(b, 5, on, 3);
    int l = jack_midi_event_write(b, n, on, 3);
    size_t max = jack_midi_max_event_size(b);
    int g = max + 1 <= sizeof big ? jack_midi_event_write(b, 11, big, max + 1) : 1;
    unsigned lost = jack_midi_get_lost_event_count(b);
    int f = jack_midi_event_write(b, 20, off, 3);
    if (!done) {
        r_on = a, r_order = o, r_late = l, r_big = g, r_off = f;
        lost_after_big = lost;
        max_ok = max > 3 && max + 1 <= sizeof big;
        count = jack_midi_get_event_count(b);
        done = 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int secs = argc > 1 ? atoi(argv[1]) : 0;
    jack_status_t st;
    jack_client_t *c = jack_client_open("midicodes", JackNoStartServer, &st);
    if (!c) {
        printf("cannot open client (status 0x%x)\n", st);
        return 1;
    }
    out = jack_port_register(c, "out", JACK_DEFAULT_MIDI_TYPE, JackPortIsOutput, 0);
    if (!out || jack_set_process_callback(c, process, NULL) || jack_activate(c)) {
        printf("cannot set up\n");
        return 1;
    }
    for (int i = 0; i < 500 && !done; i++) usleep(10000);
    if (!done) {
        printf("never processed\n");
        return 1;
    }
    printf("on=%d order=%d late=%d big=%d lost=%u off=%d count=%u max_ok=%d\n", r_on,
           r_order, r_late, r_big, lost_after_big, r_off, count, max_ok);
    fflush(stdout);
    if (secs > 0) sleep(secs);
    jack_client_close(c);
    return 0;
}
