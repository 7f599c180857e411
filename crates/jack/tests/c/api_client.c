/* A JACK client written against JACK's own headers, linked with quaver's libjack.
 * It checks API semantics, then doubles its input into its output until stdin
 * closes. Lines starting with FAIL make the Rust test fail. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jack/jack.h>
#include <jack/midiport.h>
#include <jack/ringbuffer.h>
#include <jack/session.h>
#include <jack/thread.h>

#ifndef SCHED_RESET_ON_FORK
#define SCHED_RESET_ON_FORK 0x40000000 /* linux/sched.h; set by quaver's promotion */
#endif

static jack_port_t *in_port, *out_port, *midi_in;
static volatile jack_nframes_t last_frames;
static volatile int bufsize_calls, srate_calls, connect_calls;

#define CHECK(cond, what) do { if (cond) printf("ok %s\n", what); else printf("FAIL %s\n", what); } while (0)

static int process(jack_nframes_t n, void *arg) {
    (void)arg;
    float *i = jack_port_get_buffer(in_port, n);
    float *o = jack_port_get_buffer(out_port, n);
    for (jack_nframes_t k = 0; k < n; k++) o[k] = 2.0f * i[k];
    void *mb = jack_port_get_buffer(midi_in, n);
    if (jack_midi_get_event_count(mb) != 0) o[0] = 100.0f; /* an unconnected MIDI input is empty */
    last_frames = n;
    return 0;
}

/* What a thread made by jack_client_create_thread runs with. */
static volatile int thread_policy = -1, thread_prio = -1;
static void *sched_probe(void *arg) {
    (void)arg;
    struct sched_param sp;
    int policy;
    if (pthread_getschedparam(pthread_self(), &policy, &sp) == 0) {
        thread_policy = policy;
        thread_prio = sp.sched_priority;
    }
    return NULL;
}

static int bufsize(jack_nframes_t n, void *arg) { (void)arg; (void)n; bufsize_calls++; return 0; }
static int srate(jack_nframes_t n, void *arg) { (void)arg; if (n == 48000) srate_calls++; return 0; }
static void on_connect(jack_port_id_t a, jack_port_id_t b, int c, void *arg) {
    (void)a; (void)b; (void)c; (void)arg; connect_calls++;
}

int main(void) {
    jack_status_t status = 0;
    jack_client_t *c = jack_client_open("cgain", JackNoStartServer, &status);
    if (!c) { printf("FAIL open status=0x%x\n", status); return 1; }
    CHECK(strcmp(jack_get_client_name(c), "cgain") == 0, "client name");
    CHECK(jack_get_sample_rate(c) == 48000, "sample rate");
    CHECK(jack_get_buffer_size(c) > 0, "buffer size");
    CHECK(jack_set_process_callback(c, process, NULL) == 0, "set process");
    CHECK(jack_set_buffer_size_callback(c, bufsize, NULL) == 0, "set bufsize cb");
    CHECK(jack_set_sample_rate_callback(c, srate, NULL) == 0 && srate_calls == 1,
          "sample rate callback called at once");
    CHECK(jack_set_port_connect_callback(c, on_connect, NULL) == 0, "set connect cb");
    in_port = jack_port_register(c, "in", JACK_DEFAULT_AUDIO_TYPE, JackPortIsInput, 0);
    out_port = jack_port_register(c, "out", JACK_DEFAULT_AUDIO_TYPE, JackPortIsOutput, 0);
    midi_in = jack_port_register(c, "midi", JACK_DEFAULT_MIDI_TYPE, JackPortIsInput, 0);
    CHECK(in_port && out_port && midi_in, "register ports");
    CHECK(jack_port_register(c, "bad", "no such type", JackPortIsInput, 0) == NULL,
          "unknown port type refused");
    CHECK(strcmp(jack_port_name(out_port), "cgain:out") == 0, "port name");
    CHECK(strcmp(jack_port_short_name(out_port), "out") == 0, "short name");
    CHECK(jack_port_is_mine(c, out_port), "port is mine");
    CHECK(jack_port_flags(out_port) & JackPortIsOutput, "port flags");
    CHECK(strcmp(jack_port_type(midi_in), JACK_DEFAULT_MIDI_TYPE) == 0, "midi type");

    const char **phys = jack_get_ports(c, NULL, NULL, JackPortIsPhysical | JackPortIsInput);
    int n = 0;
    while (phys && phys[n]) n++;
    CHECK(n == 2, "two physical playback ports");
    CHECK(phys && strcmp(phys[0], "null-sink:playback_FL") == 0, "first physical port");
    jack_free(phys);
    const char **mine = jack_get_ports(c, "^cgain:", NULL, 0);
    n = 0;
    while (mine && mine[n]) n++;
    CHECK(n == 3, "regex finds our 3 ports");
    jack_free(mine);
    const char **midi = jack_get_ports(c, NULL, "midi", 0);
    CHECK(midi && midi[0] && strcmp(midi[0], "cgain:midi") == 0 && !midi[1], "type regex");
    jack_free(midi);
    CHECK(jack_get_ports(c, "nothing-matches-this", NULL, 0) == NULL, "no match is NULL");

    jack_port_t *sys = jack_port_by_name(c, "system:playback_2");
    CHECK(sys && strcmp(jack_port_name(sys), "null-sink:playback_FR") == 0, "alias lookup");
    CHECK(sys && (jack_port_flags(sys) & JackPortIsPhysical), "physical flag");
    CHECK(!jack_port_is_mine(c, sys), "foreign port is not mine");
    CHECK(jack_port_get_buffer(sys, 64) == NULL, "no buffer for foreign ports");
    CHECK(jack_port_by_name(c, "cgain:out") == out_port, "own port by name");
    CHECK(jack_port_by_id(c, jack_port_uuid(out_port) & 0xffffffffu) == out_port, "own port by id");

    CHECK(jack_activate(c) == 0, "activate");
    CHECK(jack_connect(c, "cgain:out", "system:playback_1") == 0, "connect");
    CHECK(jack_connect(c, "cgain:out", "null-sink:playback_FL") == EEXIST, "connect twice");
    CHECK(jack_port_connected(out_port) == 1, "connected count");
    CHECK(jack_port_connected_to(out_port, "system:playback_1"), "connected to alias");
    const char **conns = jack_port_get_connections(out_port);
    CHECK(conns && strcmp(conns[0], "null-sink:playback_FL") == 0 && !conns[1], "connections");
    jack_free(conns);
    CHECK(jack_disconnect(c, "cgain:out", "null-sink:playback_FL") == 0, "disconnect");
    CHECK(jack_port_connected(out_port) == 0, "disconnected");
    CHECK(jack_disconnect(c, "cgain:out", "null-sink:playback_FL") != 0, "disconnect twice");

    for (int k = 0; k < 200 && (last_frames == 0 || connect_calls < 2); k++) usleep(10000);
    CHECK(last_frames == jack_get_buffer_size(c), "process sees the buffer size");
    CHECK(connect_calls >= 2, "port connect callbacks");
    CHECK(jack_frame_time(c) >= jack_last_frame_time(c), "frame time moves forward");
    jack_position_t pos;
    CHECK(jack_transport_query(c, &pos) == JackTransportStopped && pos.frame_rate == 48000
          && pos.unique_1 == pos.unique_2, "transport query");
    /* A latency pass that the disconnect above started may still run and set the
       output's range from its (now no) connections, as jackd2's would: set it again
       until one reads back after such a pass (seen once in a loaded run). */
    jack_latency_range_t r = {0, 0};
    for (int k = 0; k < 50 && !(r.min == 7 && r.max == 9); k++) {
        jack_latency_range_t set = {7, 9};
        jack_port_set_latency_range(out_port, JackPlaybackLatency, &set);
        usleep(20000);
        jack_port_get_latency_range(out_port, JackPlaybackLatency, &r);
    }
    CHECK(r.min == 7 && r.max == 9, "latency range");

    jack_native_thread_t th;
    CHECK(jack_client_create_thread(c, &th, 10, 0, sched_probe, NULL) == 0
          && jack_client_stop_thread(c, th) == 0 && thread_policy == SCHED_OTHER,
          "a non-real-time client thread");
    CHECK(jack_client_create_thread(c, &th, 10, 1, sched_probe, NULL) == 0
          && jack_client_stop_thread(c, th) == 0, "a real-time client thread");
    /* Root may use SCHED_FIFO; elsewhere the thread runs on at normal priority. */
    if (geteuid() == 0)
        CHECK((thread_policy & ~SCHED_RESET_ON_FORK) == SCHED_FIFO && thread_prio == 10,
              "it runs SCHED_FIFO 10");

    jack_ringbuffer_t *rb = jack_ringbuffer_create(100);
    CHECK(jack_ringbuffer_write_space(rb) == 127, "ringbuffer size");
    CHECK(jack_ringbuffer_write(rb, "hello", 5) == 5, "ringbuffer write");
    char buf[8] = {0};
    CHECK(jack_ringbuffer_read(rb, buf, 8) == 5 && strcmp(buf, "hello") == 0, "ringbuffer read");
    jack_ringbuffer_free(rb);

    char *uuid = jack_client_get_uuid(c);
    char *back = uuid ? jack_get_client_name_by_uuid(c, uuid) : NULL;
    CHECK(back && strcmp(back, "cgain") == 0, "uuid round trip");
    jack_free(back);
    jack_free(uuid);

    printf("ready\n");
    fflush(stdout);
    char ch;
    while (read(0, &ch, 1) > 0) {}
    CHECK(jack_deactivate(c) == 0, "deactivate");
    CHECK(jack_port_unregister(c, midi_in) == 0, "unregister");
    CHECK(jack_client_close(c) == 0, "close");
    printf("closed\n");
    return 0;
}
