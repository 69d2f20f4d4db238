"""Simulated datasets like the paper's (Table datasets), written as plenocal dataset folders.

Contents (``docs/formats.md``): white images at the paper's f-numbers, a devignetting white at
the checkerboard f-number, free-hand checkerboard frames (calibration 0.., evaluation 100..), a
controlled translation along z (frames 200..), the manifest, and ``ground_truth/`` with the true
camera (+ Ω), every pose, and the model's true BAP features and MICs of every frame.

The renderer is pluggable (:class:`Renderer`): plenocal's thin tracer by default
(:class:`ThinRenderer`), or the real-optics one (``plenocal.sim.optics.dataset``), which brings
its own camera (the thin-lens equivalent: poses are generated and validated on it), extra ground
truth, and may decline to write true observations it cannot compute exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from plenocal import __version__
from plenocal.errors import DataError
from plenocal.io import write_camera, write_manifest, write_observations, write_poses, write_raw_image
from plenocal.io.dataset import GroundTruth, ImageEntry, ImageFormat, ImageRole, Manifest
from plenocal.model.camera import PlenopticCamera
from plenocal.model.geometry import Pose
from plenocal.model.observations import BapFeatures, Observations
from plenocal.model.spec import CameraSpec
from plenocal.model.white import internal_parameters
from plenocal.sim.groundtruth import FeatureOracle, true_mics
from plenocal.sim.poses import board_centre, random_poses, translation_poses
from plenocal.sim.presets import Preset
from plenocal.sim.scene import CheckerboardPlate, Scene, WhiteDiffuser
from plenocal.sim.sensor import SensorResponse
from plenocal.sim.tracer import TracerOptics, build_optics, render

ROLES = ("white", "devignetting", "calibration", "evaluation", "translation")
FIRST_FRAME = {"calibration": 0, "evaluation": 100, "translation": 200}
FIRST_EXTRAPOLATION_FRAME = 180
"""Frame number of the first held-out frame beyond the calibrated depths (role evaluation)."""
EXTRAPOLATION_FRAMES = 2
"""Held-out frames at each end of the calibrated depths (:attr:`FrameSelection.extrapolation`)."""
EXTRAPOLATION_DEPTH_SPREAD = 0.03
"""Relative spread of those frames' board depths around their target depth."""
EXTRAPOLATION_NODE_FRACTION = 0.5
"""Those frames may show part of the board (nearer, it outgrows the image; nearer the MLA's
conjugate plane, nodes fall in fewer micro-images): at least this fraction of its nodes seen in
two micro-images or more."""
BACKGROUND = 0.3
"""Radiance of the scene behind the board (a mid-grey wall)."""
_NOMINAL_F = {"r12-d": 135.0, "upc-s": 10.0}


@dataclass(frozen=True)
class FrameSelection:
    """Which images to simulate: role → count (None = the paper's number; 0 = none)."""

    counts: dict[str, int | None] = field(default_factory=lambda: dict.fromkeys(ROLES))
    extrapolation: tuple[float, float] | None = None
    """(near, far): also :data:`EXTRAPOLATION_FRAMES` held-out frames at ``near`` × the nearest and as
    many at ``far`` × the farthest calibration frame's board depth (beyond the calibrated volume)."""

    @classmethod
    def parse(cls, spec: str | None) -> FrameSelection:
        """Parse ``"white,calibration=4,translation=3"`` (roles not listed are skipped)."""
        if spec is None or spec.strip() == "" or spec.strip() == "all":
            return cls()
        counts: dict[str, int | None] = dict.fromkeys(ROLES, 0)
        for part in spec.split(","):
            name, _, value = part.strip().partition("=")
            if name not in ROLES:
                raise DataError(f"--frames: unknown role '{name}', expected one of {', '.join(ROLES)}")
            try:
                counts[name] = int(value) if value else None
            except ValueError:
                raise DataError(f"--frames: '{part}' must be ROLE or ROLE=COUNT") from None
        return cls(counts)

    def count(self, role: str, default: int) -> int:
        c = self.counts.get(role)
        return default if c is None else int(c)


class Renderer(Protocol):
    """What :func:`simulate_dataset` needs from a renderer.

    Attributes
    ----------
    camera : PlenopticCamera
        The camera of the ground truth (``camera.json``), of the poses and of the true features
        (for real optics: the thin-lens equivalent).
    writes_observations : bool
        Whether ``ground_truth/observations.npz`` (the model's BAP features of ``camera``) is exact
        for these images, hence written.
    pose_image_radius_px : float or None
        Boards are kept within this radius of the principal point (a real lens's lit image
        circle); None: the whole sensor.
    """

    camera: PlenopticCamera
    writes_observations: bool
    pose_image_radius_px: float | None

    def render(self, scene: Scene | WhiteDiffuser, *, f_number: float, rays: int, seed: int, image_id: int) -> NDArray[np.float32]:
        """A noise-free radiance image (1.0 = a fully lit micro-image under the white diffuser)."""
        ...

    def write_ground_truth(self, folder: Path, *, f_numbers: tuple[float, ...]) -> dict[str, Any]:
        """Write extra ground-truth files into ``folder`` (``ground_truth/``); returns the
        manifest provenance entries that describe the renderer."""
        ...


@dataclass
class ThinRenderer:
    """plenocal's thin-lens tracer (:mod:`plenocal.sim.tracer`) on ``camera``."""

    camera: PlenopticCamera
    writes_observations: bool = True
    pose_image_radius_px: float | None = None
    _optics: dict[float, TracerOptics] = field(default_factory=dict, repr=False)

    def render(self, scene: Scene | WhiteDiffuser, *, f_number: float, rays: int, seed: int, image_id: int) -> NDArray[np.float32]:
        if f_number not in self._optics:
            self._optics[f_number] = build_optics(self.camera, f_number)
        return render(self.camera, scene, f_number=f_number, rays=rays, seed=seed, image_id=image_id,
                      optics=self._optics[f_number])

    def write_ground_truth(self, folder: Path, *, f_numbers: tuple[float, ...]) -> dict[str, Any]:
        return {}


@dataclass(frozen=True)
class _Job:
    entry: ImageEntry
    image_id: int
    f_number: float
    pose: Pose | None


def _f_label(n: float) -> str:
    return f"{n:g}".replace(".", "p")


def plan_images(
    preset: Preset, *, seed: int, frames: FrameSelection, oracle: FeatureOracle,
    camera: PlenopticCamera | None = None, image_radius_px: float | None = None,
) -> tuple[list[_Job], dict[int, Pose]]:
    """Every image to render (with its pose) and the frame poses, deterministically from seed.

    ``camera``: the camera the poses are generated on (default: the preset's); ``image_radius_px``:
    boards stay within this radius of the principal point."""
    plan = preset.plan
    camera = preset.camera if camera is None else camera
    jobs: list[_Job] = []
    whites = plan.white_f_numbers[: frames.count("white", len(plan.white_f_numbers))]
    for i, n in enumerate(whites):
        entry = ImageEntry(f"images/white-f{_f_label(n)}.png", ImageRole.WHITE, f_number=n)
        jobs.append(_Job(entry, 1000 + i, n, None))
    n_board = plan.checkerboard_f_number
    if frames.count("devignetting", 1) > 0:
        jobs.append(_Job(ImageEntry("images/devignetting.png", ImageRole.DEVIGNETTING, f_number=n_board), 1100, n_board, None))
    n_cal = frames.count("calibration", plan.n_calibration)
    n_eval = frames.count("evaluation", plan.n_evaluation)
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0xB0A4D]))
    poses: dict[int, Pose] = {}
    if n_cal + n_eval > 0:
        free = random_poses(
            camera, plan.board, n_cal + n_eval, distance_range_mm=plan.calibration_range_mm,
            max_tilt_rad=plan.max_tilt_rad, rng=rng, oracle=oracle, image_radius_px=image_radius_px,
        )
        for role, chunk in (("calibration", free[:n_cal]), ("evaluation", free[n_cal:])):
            prefix = "calib" if role == "calibration" else "eval"
            for i, pose in enumerate(chunk):
                frame = FIRST_FRAME[role] + i
                entry = ImageEntry(f"images/{prefix}-{i:03d}.png", ImageRole(role), f_number=n_board, frame=frame)
                jobs.append(_Job(entry, frame, n_board, pose))
                poses[frame] = pose
    if frames.extrapolation is not None and n_cal > 0:
        depth = [float((p.translation + p.rotation @ board_centre(plan.board))[2]) for f, p in poses.items()
                 if f < FIRST_FRAME["evaluation"]]
        frame = FIRST_EXTRAPOLATION_FRAME
        for label, z in (("near", frames.extrapolation[0] * min(depth)), ("far", frames.extrapolation[1] * max(depth))):
            spread = (z * (1.0 - EXTRAPOLATION_DEPTH_SPREAD), z * (1.0 + EXTRAPOLATION_DEPTH_SPREAD))
            for i, pose in enumerate(random_poses(camera, plan.board, EXTRAPOLATION_FRAMES, distance_range_mm=spread,
                                                  max_tilt_rad=plan.max_tilt_rad, rng=rng, oracle=oracle,
                                                  image_radius_px=image_radius_px,
                                                  min_node_fraction=EXTRAPOLATION_NODE_FRACTION)):
                entry = ImageEntry(f"images/eval-{label}-{i:03d}.png", ImageRole.EVALUATION, f_number=n_board, frame=frame)
                jobs.append(_Job(entry, frame, n_board, pose))
                poses[frame] = pose
                frame += 1
    positions = plan.translation_positions_mm
    positions = positions[: frames.count("translation", len(positions))]
    if positions:
        for i, pose in enumerate(translation_poses(plan.board, positions, camera=camera)):
            frame = FIRST_FRAME["translation"] + i
            entry = ImageEntry(
                f"images/trans-{i:03d}.png", ImageRole.TRANSLATION, f_number=n_board, frame=frame,
                sequence=0, displacement_mm=float(positions[i] - positions[0]),
            )
            jobs.append(_Job(entry, frame, n_board, pose))
            poses[frame] = pose
    return jobs, poses


def camera_spec(preset: Preset) -> CameraSpec:
    """What a user would know: sensor, lattice, types, nominal F, focus distance, configuration."""
    cam = preset.camera
    key = preset.name.split(" ")[0]
    return CameraSpec(
        pixel_size_mm=cam.sensor.pixel_size_mm,
        width_px=cam.sensor.width_px,
        height_px=cam.sensor.height_px,
        lattice=cam.mla.lattice,
        n_types=cam.n_types,
        type_row_shift=cam.mla.types.row_shift,
        main_lens_focal_length_mm=_NOMINAL_F.get(key, 50.0),
        focus_distance_mm=cam.focus_distance_mm,
        configuration=cam.configuration,
    )


def simulate_dataset(
    preset: Preset,
    folder: str | Path,
    *,
    seed: int = 0,
    rays: int = 30,
    frames: FrameSelection | None = None,
    response: SensorResponse | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    renderer: Renderer | None = None,
) -> Manifest:
    """Render and write a dataset folder for ``preset``.

    Parameters
    ----------
    preset : Preset
    folder : path
        Created if missing; files are written atomically.
    seed : int
        Poses, ray sampling and noise all derive from it: same seed, same bytes.
    rays : int
        Rays per pixel and contributing micro-lens.
    frames : FrameSelection, optional
        Which images (default: the paper's: 5 or 3 whites, 1 devignetting, 16 + 15 free-hand,
        the translation sequence).
    response : SensorResponse, optional
        Noise, bit depth, colour (default: 8-bit grey with photon and read noise).
    progress : callable(label, done, total), optional
        Called after each image.
    renderer : Renderer, optional
        Default: :class:`ThinRenderer` of the preset's camera.

    Returns
    -------
    Manifest
    """
    frames = FrameSelection() if frames is None else frames
    response = SensorResponse() if response is None else response
    out = Path(folder)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "ground_truth").mkdir(parents=True, exist_ok=True)
    renderer = ThinRenderer(preset.camera) if renderer is None else renderer
    camera = renderer.camera
    board = preset.plan.board
    oracle = FeatureOracle(camera)
    jobs, poses = plan_images(preset, seed=seed, frames=frames, oracle=oracle, camera=camera,
                              image_radius_px=renderer.pose_image_radius_px)
    features: list[BapFeatures] = []
    for done, job in enumerate(jobs):
        n = job.f_number
        if job.pose is None:
            scene: Scene | WhiteDiffuser = WhiteDiffuser()
        else:
            scene = Scene((CheckerboardPlate(board, job.pose),), background=BACKGROUND)
            assert job.entry.frame is not None
            if renderer.writes_observations:
                features.append(oracle.board_features(board, job.pose, frame=job.entry.frame))
        radiance = renderer.render(scene, f_number=n, rays=rays, seed=seed, image_id=job.image_id)
        image = response.apply(radiance, seed=seed, image_id=job.image_id)
        write_raw_image(out / job.entry.path, image, response.bit_depth)
        if progress is not None:
            progress(job.entry.path, done + 1, len(jobs))
    truth_obs = "ground_truth/observations.npz" if renderer.writes_observations else None
    gt = GroundTruth("ground_truth/camera.json", "ground_truth/poses.json", truth_obs)
    write_camera(out / "ground_truth/camera.json", camera, internal_parameters=internal_parameters(camera),
                 provenance={"generator": "plenocal simulate", "preset": preset.name})
    write_poses(out / "ground_truth/poses.json", poses)
    if truth_obs is not None:
        write_observations(out / truth_obs, Observations(BapFeatures.concatenate(features), true_mics(camera)))
    f_numbers = tuple(sorted({j.f_number for j in jobs}))
    extra = renderer.write_ground_truth(out / "ground_truth", f_numbers=f_numbers)
    manifest = Manifest(
        camera_spec=camera_spec(preset),
        target=board,
        images=tuple(j.entry for j in jobs),
        image_format=ImageFormat(response.bit_depth, response.color),
        name=preset.name.replace(" (small)", "-small"),
        ground_truth=gt,
        provenance={
            "generator": "plenocal simulate",
            "version": __version__,
            "seed": int(seed),
            "preset": preset.name,
            "rays_per_pixel": int(rays),
            "crop_origin_px": list(preset.crop_origin_px),
            "crop_origin_lens": list(preset.crop_origin_lens),
            "sensor_response": {
                "white_level": response.white_level,
                "electrons_at_white": response.electrons_at_white,
                "read_noise_electrons": response.read_noise_electrons,
                "photon_noise": response.photon_noise,
                "read_noise": response.read_noise,
            },
            "background_radiance": BACKGROUND,
            "checkerboard_f_number": preset.plan.checkerboard_f_number,
            "max_tilt_deg": math.degrees(preset.plan.max_tilt_rad),
        } | extra,
    )
    write_manifest(out, manifest)
    return manifest
