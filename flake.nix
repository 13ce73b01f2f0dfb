# fixgate as a Nix flake: the package (built from the committed Cargo.lock), an app, a dev shell
# with Rust, Python and pytest, and a check that runs the test suite.
#
#   nix run .# -- demo          nix develop          nix flake check
#
# The integration tests drive real pytest suites, so the check needs python3 with pytest and git
# in the build sandbox; tests that need user namespaces report "containment": "none" there.
{
  description = "Audits a patch to a Python repository's pytest suite and says whether its green is real";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs = { self, nixpkgs }:
    let
      systems = [ "x86_64-linux" "aarch64-linux" ];
      forAllSystems = f: nixpkgs.lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});
      cargoToml = builtins.fromTOML (builtins.readFile ./Cargo.toml);
      pythonWithPytest = pkgs: pkgs.python3.withPackages (ps: [ ps.pytest ]);

      fixgateFor = pkgs: pkgs.rustPlatform.buildRustPackage {
        pname = "fixgate";
        version = cargoToml.package.version;
        # A flake copies only tracked files; a local target/ is left out all the same.
        src = pkgs.lib.cleanSourceWith {
          src = pkgs.lib.cleanSource ./.;
          filter = path: type: !(type == "directory" && baseNameOf path == "target");
        };
        cargoLock.lockFile = ./Cargo.lock;

        # build.rs cannot run git on a store path: the flake's revision is the commit.
        FIXGATE_COMMIT = self.shortRev or self.dirtyShortRev or "unknown";

        # git2 is built without default features: libgit2 is compiled from its vendored source.
        nativeBuildInputs = [ pkgs.pkg-config ];
        buildInputs = [ pkgs.zlib ];

        # The package builds without running the tests; `checks.tests` runs them.
        doCheck = false;

        postInstall = ''
          mkdir -p $out/share/man/man1
          $out/bin/fixgate man > $out/share/man/man1/fixgate.1
          for shell in bash fish zsh; do
            $out/bin/fixgate completions $shell > completion.$shell
          done
          install -Dm644 completion.bash $out/share/bash-completion/completions/fixgate
          install -Dm644 completion.fish $out/share/fish/vendor_completions.d/fixgate.fish
          install -Dm644 completion.zsh $out/share/zsh/site-functions/_fixgate
        '';

        meta = {
          description = cargoToml.package.description;
          license = with pkgs.lib.licenses; [ mit asl20 ];
          mainProgram = "fixgate";
          platforms = pkgs.lib.platforms.linux;
        };
      };
    in
    {
      packages = forAllSystems (pkgs: rec {
        fixgate = fixgateFor pkgs;
        default = fixgate;
      });

      apps = forAllSystems (pkgs:
        let system = pkgs.stdenv.hostPlatform.system; in rec {
          fixgate = {
            type = "app";
            program = "${self.packages.${system}.fixgate}/bin/fixgate";
          };
          default = fixgate;
        });

      devShells = forAllSystems (pkgs: {
        default = pkgs.mkShell {
          packages = [
            pkgs.cargo
            pkgs.rustc
            pkgs.clippy
            pkgs.rustfmt
            pkgs.rust-analyzer
            pkgs.maturin
            pkgs.git
            (pythonWithPytest pkgs)
          ];
          # Make fixgate's tests use this shell's interpreter rather than making a venv.
          FIXGATE_TEST_PYTHON = "${pythonWithPytest pkgs}/bin/python3";
        };
      });

      checks = forAllSystems (pkgs:
        let system = pkgs.stdenv.hostPlatform.system; in {
          tests = self.packages.${system}.fixgate.overrideAttrs (old: {
            pname = "fixgate-tests";
            doCheck = true;
            nativeCheckInputs = (old.nativeCheckInputs or [ ]) ++ [ pkgs.git (pythonWithPytest pkgs) ];
            cargoTestFlags = [ "--workspace" ];
            preCheck = ''
              export HOME=$TMPDIR
              export FIXGATE_TEST_PYTHON=${pythonWithPytest pkgs}/bin/python3
            '';
          });
        });
    };
}
