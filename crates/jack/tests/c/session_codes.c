/* JACK's session API given bad input: one answer per line, for the Rust test to
 * compare with what jackd2's API documents. */
/* The session API is deprecated in JACK's headers; these are its tests. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <stdio.h>
#include <string.h>
#include <jack/jack.h>
#include <jack/session.h>

static void on_session(jack_session_event_t *ev, void *arg) {
    (void)arg;
    jack_session_event_free(ev);
}

int main(void) {
    jack_client_t *c = jack_client_open("session_codes", JackNoStartServer, NULL);
    if (!c) {
        printf("FAIL open\n");
        return 1;
    }
    const char *me = jack_get_client_name(c);
    printf("has_unknown %d\n", jack_client_has_session_callback(c, "nobody"));
    printf("has_own_before %d\n", jack_client_has_session_callback(c, me));
    printf("set %d\n", jack_set_session_callback(c, on_session, NULL));
    printf("has_own_after %d\n", jack_client_has_session_callback(c, me));
    /* A reply nobody asked for. */
    jack_session_event_t ev;
    memset(&ev, 0, sizeof ev);
    printf("reply_unasked %d\n", jack_session_reply(c, &ev));
    /* A directory longer than a notify request holds. */
    char path[400];
    memset(path, 'x', sizeof path);
    path[0] = '/';
    path[sizeof path - 2] = '/';
    path[sizeof path - 1] = 0;
    jack_session_command_t *r = jack_session_notify(c, NULL, JackSessionSave, path);
    printf("notify_long %s\n", r ? "list" : "NULL");
    if (r)
        jack_session_commands_free(r);
    /* A relative directory. */
    r = jack_session_notify(c, NULL, JackSessionSave, "relative/");
    printf("notify_relative %s\n", r ? "list" : "NULL");
    if (r)
        jack_session_commands_free(r);
    /* A target no client is: an empty list, as jackd2 answers. */
    r = jack_session_notify(c, "nobody", JackSessionSave, "/tmp/");
    printf("notify_unknown_target %s\n", r ? (r[0].uuid ? "entries" : "empty") : "NULL");
    if (r)
        jack_session_commands_free(r);
    jack_client_close(c);
    return 0;
}
