#!/usr/bin/env sh
# Regenerate the speech fixtures used by the transcription tests.
# Needs espeak-ng and ffmpeg (apt-get install -y espeak-ng ffmpeg); the tests
# themselves need neither: the generated files are committed.
#
# speech.wav  11025 Hz 16-bit PCM   (soundfile path, resampled up to 16 kHz)
# speech.flac 11025 Hz FLAC         (soundfile path)
# speech.ogg  22050 Hz Vorbis       (soundfile path)
# speech.mp3  22050 Hz MP3 32 kb/s  (PyAV fallback path)
set -eu
cd "$(dirname "$0")"
TEXT="Please send the weekly report to the team by Friday morning."
printf '%s\n' "$TEXT" > speech.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
espeak-ng -v en-us -s 160 -w "$tmp/speech.wav" "$TEXT"
ffmpeg -loglevel error -y -i "$tmp/speech.wav" -ar 11025 -ac 1 -c:a pcm_s16le -map_metadata -1 -bitexact speech.wav
ffmpeg -loglevel error -y -i "$tmp/speech.wav" -ar 11025 -ac 1 -c:a flac -compression_level 12 -map_metadata -1 -bitexact speech.flac
ffmpeg -loglevel error -y -i "$tmp/speech.wav" -ac 1 -c:a libvorbis -q:a 0 -map_metadata -1 -bitexact speech.ogg
ffmpeg -loglevel error -y -i "$tmp/speech.wav" -ac 1 -c:a libmp3lame -b:a 32k -map_metadata -1 -bitexact speech.mp3
ls -l speech.*
