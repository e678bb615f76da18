package connlimit

import (
	"net"
	"testing"
)

func TestPeerOf(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.1:80", "192.0.2.1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::"},
		{"[2001:db8:1:2:ffff::1]:80", "2001:db8:1:2::"},
		{"[fe80::1%eth0]:80", "fe80::"},
		{"127.0.0.2:1", "127.0.0.2"},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := peerOf(a).String(); got != tc.want {
			t.Errorf("peerOf(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
	if got := peerOf(&net.UnixAddr{Name: "@x", Net: "unix"}); got.IsValid() {
		t.Errorf("a Unix address is peer %s", got)
	}
}
