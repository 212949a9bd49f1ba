package runtimemode

import "testing"

func TestDecide(t *testing.T) {
	tests := []struct {
		runtime, version string
		want             Mode
	}{
		{"containerd", "2.4.2", Spec},
		{"containerd", "v2.2.1", Spec},
		{"containerd", "2.3.0", Spec},
		{"containerd", "3.0", Spec},
		{"containerd", "2.2.0", Namespace},
		{"containerd", "2.1.9+unknown", Namespace},
		{"containerd", "v1.7.27", Namespace},
		{"containerd", "2.0.0-rc.1", Namespace},
		{"containerd", "", Namespace},
		{"containerd", "main", Namespace},
		{"containerd", "2.x.1", Namespace},
		{"cri-o", "1.35.0", Spec},
		{"CRI-O", "1.34.9", Namespace},
		{"podman", "9.9.9", Namespace},
		{"", "", Namespace},
	}
	for _, tc := range tests {
		got, why := Decide(tc.runtime, tc.version)
		if got != tc.want {
			t.Errorf("Decide(%q, %q) = %s (%s), want %s", tc.runtime, tc.version, got, why, tc.want)
		}
		if why == "" {
			t.Errorf("Decide(%q, %q) gave no reason", tc.runtime, tc.version)
		}
	}
}
